#include "data/worker_pool.h"

#include <pthread.h>
#include <torch/torch.h>

#include <atomic>
#include <string>

#include "core/cpu_threads.h"
#include "core/error.h"

namespace volt {
namespace {

std::atomic<int64_t> g_running_threads{0};

}  // namespace

int64_t WorkerPool::running_threads() { return g_running_threads.load(); }

WorkerPool::WorkerPool(int64_t num_workers) {
  check<ConfigurationError>(num_workers >= 1, "WorkerPool: expected num_workers >= 1, got ", num_workers);
  threads_.reserve(static_cast<size_t>(num_workers));
  for (int64_t worker = 0; worker < num_workers; ++worker) {
    threads_.emplace_back([this, worker] { run(worker); });
    ++g_running_threads;
    // Named so that a debugger or `top -H` shows which threads are the loader's.
    const std::string name = "volt-data-" + std::to_string(worker);
    pthread_setname_np(threads_.back().native_handle(), name.substr(0, 15).c_str());
  }
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    queue_.clear();
  }
  work_.notify_all();
  for (auto& thread : threads_) {
    thread.join();
    --g_running_threads;
  }
}

void WorkerPool::submit(Task task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(task));
  }
  work_.notify_one();
}

void WorkerPool::run(int64_t worker) {
  run_intra_op_inline_on_this_thread();
  torch::NoGradGuard no_grad;
  while (true) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task(worker);  // a task catches its own exceptions (BatchStream keeps them for the consumer)
  }
}

}  // namespace volt

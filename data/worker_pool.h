#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace volt {

// The threads a DataLoader builds its batches on (DataLoaderOptions::num_workers). Tasks run in
// the order they were submitted, each on whichever worker is free first. Every worker runs
// LibTorch's operations on its own thread only (run_intra_op_inline_on_this_thread in
// core/cpu_threads.h) and without autograd.
//
// Thread-safe. The destructor lets the tasks that are running finish, drops the queued ones and
// joins the threads; a task must therefore not wait for anything the destroying thread does.
class WorkerPool {
 public:
  using Task = std::function<void(int64_t worker)>;  // `worker`: 0 .. size()-1

  explicit WorkerPool(int64_t num_workers);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void submit(Task task);
  int64_t size() const { return static_cast<int64_t>(threads_.size()); }
  // Worker threads started and not yet joined, across every pool of the process (tests and
  // diagnostics: a loader's workers end with its stream unless persistent_workers).
  static int64_t running_threads();

 private:
  void run(int64_t worker);

  std::mutex mutex_;
  std::condition_variable work_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace volt

// See Note [Ring collectives off the calling thread] in ring_worker.h.
#include "distributed/transports/ring_worker.h"

namespace volt {

// c10d's Work does the waiting (a condition variable, the timeout, the rethrow); the worker only
// says when the ring is done.
class RingWorker::Job : public c10d::Work {
 public:
  void complete(std::exception_ptr error) { finish(std::move(error)); }
};

RingWorker::RingWorker() : thread_([this] { run(); }) {}

RingWorker::~RingWorker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

c10::intrusive_ptr<c10d::Work> RingWorker::submit(std::function<void()> ring) {
  auto job = c10::make_intrusive<Job>();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.emplace_back(job, std::move(ring));
  }
  wake_.notify_one();
  return job;
}

void RingWorker::run() {
  for (;;) {
    std::pair<c10::intrusive_ptr<Job>, std::function<void()>> next;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left
      next = std::move(queue_.front());
      queue_.pop_front();
    }
    std::exception_ptr error;
    try {
      next.second();
    } catch (...) {
      error = std::current_exception();
    }
    next.first->complete(error);
  }
}

}  // namespace volt

#pragma once
// Note [Ring collectives off the calling thread]: volt's rings (ring_reduce_scatter.h,
// ring_all_gather.h) are point-to-point sends and receives that someone must post and wait for,
// step by step. On the calling thread they would block it for the whole collective: a
// reduce-scatter launched from a gradient hook would stop backward until it completed, instead
// of overlapping with the layers still to run (as c10d's own collectives do on the process
// group's worker threads). So each communicator runs its rings on one thread of its own, in the
// order they were submitted: the rings share one message tag (ring_chunks.h), and one thread
// running them one after the other keeps every rank's messages in the same order. A submitted
// ring is a c10d Work, so a CollectiveHandle waits for it like any other collective (under the
// communicator's timeout, its exception rethrown by wait()).
//
// Thread-safe: submit() may be called from any thread (the training thread, autograd's).
// Private to distributed/.
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "distributed/c10d_compat.h"

namespace volt {

class RingWorker {
 public:
  RingWorker();
  // Runs what was submitted, then stops the thread.
  ~RingWorker();
  RingWorker(const RingWorker&) = delete;
  RingWorker& operator=(const RingWorker&) = delete;

  // Runs `ring` on the worker thread after every ring submitted before it. The Work completes
  // when it has run; what it throws is the Work's exception.
  c10::intrusive_ptr<c10d::Work> submit(std::function<void()> ring);

 private:
  class Job;
  void run();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::pair<c10::intrusive_ptr<Job>, std::function<void()>>> queue_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace volt

#pragma once
// What a CollectiveHandle holds, and how a failed collective is worded. Private to distributed/
// (it includes c10d).
#include <deque>
#include <exception>
#include <string>

#include "core/error.h"
#include "distributed/c10d_compat.h"
#include "distributed/collective_handle.h"
#include "distributed/peer_monitor.h"

namespace volt {

struct CollectiveHandle::State {
  // A step after the collective: transforms the result; `starts_collective` when it waits for a
  // collective of its own (then_collective), which makes the handle not complete until it ran.
  struct Step {
    std::function<torch::Tensor(const torch::Tensor&)> run;
    bool starts_collective = false;
  };

  c10::intrusive_ptr<c10d::Work> work;    // null when nothing is in flight
  std::function<torch::Tensor()> finish;  // after the work: copy back, divide, slice
  std::deque<Step> steps;
  std::chrono::milliseconds timeout{0};
  // Note [Waiting for NCCL without blocking the host] (collective_handle.cpp): wait() orders the
  // caller's CUDA stream after the collective and returns; the process group's watchdog enforces
  // the timeout.
  bool stream_ordered = false;
  std::string what;                       // "Communicator (rank 1 of 2): all_reduce #7 ..."
  std::function<std::string()> diagnose;  // why peers may have failed (may be empty)
  // Note [Diagnosing a hang]: the monitor, when hangs are checked, and where this rank is while
  // it waits for this collective.
  std::shared_ptr<PeerMonitor> monitor;
  RankPosition position;
  bool done = false;
  std::exception_ptr error;  // a failed wait: rethrown by every later wait
  torch::Tensor result;
};

// Marks the calling thread blocked in `position` for its lifetime (Note [Diagnosing a hang]);
// nothing without a monitor.
class BlockedIn {
 public:
  BlockedIn(const std::shared_ptr<PeerMonitor>& monitor, const RankPosition& position) : monitor_(monitor.get()) {
    if (monitor_) monitor_->enter_wait(position);
  }
  ~BlockedIn() {
    if (monitor_) monitor_->leave_wait();
  }
  BlockedIn(const BlockedIn&) = delete;
  BlockedIn& operator=(const BlockedIn&) = delete;

 private:
  PeerMonitor* monitor_;
};

// "<what> failed: <cause>. <diagnosis>".
std::string failure_message(const CollectiveHandle::State& state, const std::string& cause);

// The first line of an exception's message, without c10's backtrace.
std::string cause_of(const std::exception& e);

// The error for a collective that failed with `e` (c10d's or Gloo's), told apart: a timeout
// (with what to do) or a peer's failure.
DistributedError collective_failure(const CollectiveHandle::State& state, const std::exception& e);

}  // namespace volt

#pragma once
// Private to distributed/ (it includes c10d).
//
// Note [Naming the failed rank]
// When a collective fails, Gloo knows only that a connection closed or a wait timed out; it does
// not know which rank is to blame, or why. The PeerMonitor gives the surviving ranks that answer
// through the rendezvous store, on a connection of its own:
//   - every rank publishes a heartbeat ("beat/<rank>" = "<beat count> <collectives started>")
//     from a background thread every `interval`;
//   - a rank that fails with an exception first writes "failure/<rank>" = its message
//     (Communicator::report_failure, called by the strategy's on_exception);
//   - after a failed collective, diagnose() reads them: a rank that reported is named with its
//     message; a rank whose heartbeat stopped over ~4 intervals died or is frozen; a rank that is
//     alive but has started fewer collectives than this one is stalled or took another path;
//     a store that no longer answers means the rank hosting it (rank 0) is gone.
// The cost is one small store write per rank per interval, and nothing on the collectives' path
// but an atomic counter.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "distributed/c10d_compat.h"

namespace volt {

class PeerMonitor {
 public:
  // `store` is a store connection used by nothing else (the heartbeat thread writes on it).
  // `store_host` describes where the store lives, for messages ("rank 0", "the torchelastic agent").
  PeerMonitor(c10::intrusive_ptr<c10d::Store> store, int64_t rank, int64_t world_size,
              std::chrono::milliseconds interval, std::string store_host);
  ~PeerMonitor();
  PeerMonitor(const PeerMonitor&) = delete;
  PeerMonitor& operator=(const PeerMonitor&) = delete;

  // The number of collectives this rank has started on the root communicator (cheap, atomic).
  void set_progress(int64_t collectives_started) { progress_.store(collectives_started); }
  // Best effort: records why this rank is about to fail, for the others' diagnosis.
  void report_failure(const std::string& message);
  // A sentence about the other ranks after a collective failed ("" when nothing is known).
  // `sequence`: the number of the failed collective on the root communicator, or -1 (a
  // sub-group's collective, whose numbering is not comparable). Takes up to ~4 intervals.
  std::string diagnose(int64_t sequence);

 private:
  void beat_loop();

  c10::intrusive_ptr<c10d::Store> store_;
  int64_t rank_, world_size_;
  std::chrono::milliseconds interval_;
  std::string store_host_;
  std::atomic<int64_t> progress_{0};
  std::mutex mutex_;  // serializes use of store_ between the heartbeat thread and callers
  std::condition_variable stop_requested_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace volt

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
// but an atomic counter and a record in a ring (Note [Diagnosing a hang] in hang_check.h).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "distributed/c10d_compat.h"
#include "distributed/hang_check.h"

namespace volt {

class PeerMonitor {
 public:
  // `store` is a store connection used by nothing else (the heartbeat thread writes on it).
  // `store_host` describes where the store lives, for messages ("rank 0", "the torchelastic agent").
  PeerMonitor(c10::intrusive_ptr<c10d::Store> store, int64_t rank, int64_t world_size,
              std::chrono::milliseconds interval, std::string store_host, HangCheckOptions hang_check = {});
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

  // ---- Note [Diagnosing a hang]
  // Records a collective (or send, receive) this rank starts, in the ring of its last 64 (the
  // communicator records only while the hang check is on).
  void record(RankPosition position);
  // The calling thread is blocked waiting for `position` until leave_wait(); nests.
  void enter_wait(RankPosition position);
  void leave_wait();
  // The hang report once one is certain and the action is to fail; "" until then.
  std::string hang_verdict() const;
  const HangCheckOptions& hang_check() const { return hang_check_; }
  // The ring, oldest first, one collective a line (what is written for a post-mortem).
  std::string ring_text() const;

 private:
  void beat_loop();
  // While blocked past the interval: reads every rank's position; after two equal readings that
  // prove a hang, reports it (once) and, unless warn_only, sets the verdict. Under mutex_.
  void check_for_hang();
  std::string published_position() const;

  c10::intrusive_ptr<c10d::Store> store_;
  int64_t rank_, world_size_;
  std::chrono::milliseconds interval_;
  std::string store_host_;
  std::atomic<int64_t> progress_{0};
  std::mutex mutex_;  // serializes use of store_ between the heartbeat thread and callers
  std::condition_variable stop_requested_;
  bool stopping_ = false;

  HangCheckOptions hang_check_;
  mutable std::mutex positions_mutex_;  // the ring, the waits and the verdict (the heartbeat thread reads them)
  std::deque<std::pair<std::chrono::system_clock::time_point, RankPosition>> ring_;
  std::vector<std::pair<RankPosition, std::chrono::steady_clock::time_point>> waits_;  // innermost last
  std::string verdict_;
  std::string reported_;  // the last report printed (warn_only prints each distinct one once)
  // The previous reading of every rank's beat while blocked past the interval: beat counts and
  // positions (cleared when this rank is not blocked).
  std::optional<std::vector<std::pair<int64_t, std::string>>> previous_reading_;

  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace volt

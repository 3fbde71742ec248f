#pragma once
// How volt calls into a c10d process group from several threads of one process.
//
// Note [Entering c10d from several threads]
// LibTorch 2.x records every collective a Gloo or NCCL process group enqueues in a flight
// recorder, one per process, on by default (TORCH_FR_BUFFER_SIZE, 2000 entries). The first
// record of each group adds the group to a std::map before the recorder takes its own mutex, so
// a group's first collective on one thread racing with any group's collective on another thread
// corrupts that map: a SIGSEGV in _Rb_tree_insert_and_rebalance under
// FlightRecorder::recordWithResetEnabled, seen about once in ten runs of 4 ranks as threads whose
// node groups start at once (2.11). Threads meet there in a real job too: the ring thread's
// reductions and the main thread's. So every call that may enqueue work on a process group (its
// collectives, and the rings' point-to-point send and recv) goes through the group's C10dEntry:
// its first call holds a process-wide lock alone, every later call shares it. (A Gloo group's
// first call is the barrier that ends its construction.)
// Only the enqueue is held (a Work is waited for outside), so the first call of one group never
// waits for another group's collective to finish, only for its enqueue. LibTorch 1.13 has no
// recorder; there the lock is an uncontended atomic a call.
#include <atomic>
#include <mutex>
#include <shared_mutex>

namespace volt {

class C10dEntry {
 public:
  // Runs `call` (which enqueues at most one collective on this entry's group) and returns its result.
  template <typename Call>
  auto enter(Call&& call) {
    if (entered_.load(std::memory_order_acquire)) {
      std::shared_lock<std::shared_mutex> shared(process_wide());
      return call();
    }
    std::unique_lock<std::shared_mutex> alone(process_wide());
    auto result = call();
    entered_.store(true, std::memory_order_release);
    return result;
  }

 private:
  static std::shared_mutex& process_wide() {
    static std::shared_mutex mutex;
    return mutex;
  }

  std::atomic<bool> entered_{false};
};

}  // namespace volt

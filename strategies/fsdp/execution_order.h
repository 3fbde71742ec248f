#pragma once
// The order in which a model's FSDP units run their forwards, recorded once and then used to
// prefetch (Note [Prefetching a unit]): the unit after this one in forward, the one before it in
// backward (backward runs the forwards in reverse). PyTorch's FSDP records the same thing in its
// first iteration (its execution order) for forward_prefetch and backward_prefetch.
//
// Recording covers the first forward pass of the model (a strategy calls start() and stop()
// around it); a unit met again in that pass keeps its first place, a unit first met in a later
// pass has no neighbours (it is never prefetched, and prefetches nothing). Every rank runs the
// same units in the same order (as every FSDP collective needs), so every rank records the same
// order and prefetches the same units at the same points. Not thread-safe.
#include <vector>

namespace volt::fsdp {

class FullyShardedUnit;

class ExecutionOrder {
 public:
  // Recording starts at the next forward pass, unless an order is recorded already.
  void start();
  // Ends the recording: the order is fixed from now on.
  void stop();
  // A unit's forward began; kept when recording and not seen yet.
  void record(FullyShardedUnit* unit);
  bool recorded() const { return fixed_; }

  // The unit recorded after / before `unit`; null when there is none, the order is not fixed yet,
  // or `unit` was not recorded.
  FullyShardedUnit* after(const FullyShardedUnit* unit) const;
  FullyShardedUnit* before(const FullyShardedUnit* unit) const;

  const std::vector<FullyShardedUnit*>& units() const { return order_; }

 private:
  FullyShardedUnit* neighbour(const FullyShardedUnit* unit, int step) const;

  std::vector<FullyShardedUnit*> order_;
  bool recording_ = false;
  bool fixed_ = false;
};

}  // namespace volt::fsdp

#include "strategies/fsdp/execution_order.h"

#include <algorithm>

namespace volt::fsdp {

void ExecutionOrder::start() { recording_ = !fixed_; }

void ExecutionOrder::stop() {
  if (!recording_) return;
  recording_ = false;
  fixed_ = true;
}

void ExecutionOrder::record(FullyShardedUnit* unit) {
  if (recording_ && std::find(order_.begin(), order_.end(), unit) == order_.end()) order_.push_back(unit);
}

FullyShardedUnit* ExecutionOrder::after(const FullyShardedUnit* unit) const { return neighbour(unit, +1); }

FullyShardedUnit* ExecutionOrder::before(const FullyShardedUnit* unit) const { return neighbour(unit, -1); }

FullyShardedUnit* ExecutionOrder::neighbour(const FullyShardedUnit* unit, int step) const {
  if (!fixed_) return nullptr;
  const auto found = std::find(order_.begin(), order_.end(), unit);
  if (found == order_.end()) return nullptr;
  const auto index = (found - order_.begin()) + step;
  if (index < 0 || index >= static_cast<std::ptrdiff_t>(order_.size())) return nullptr;
  return order_[static_cast<size_t>(index)];
}

}  // namespace volt::fsdp

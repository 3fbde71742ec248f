#include "strategies/buffer_broadcast_placement.h"

#include "strategies/parallel_strategy.h"

namespace volt {

BufferBroadcastPlacement::BufferBroadcastPlacement(ParallelStrategy& owner, bool broadcast_buffers)
    : Placement(owner), parallel_owner_(owner), broadcast_buffers_(broadcast_buffers) {}

ScopeGuard BufferBroadcastPlacement::forward_context(RunningStage stage) {
  if (stage == RunningStage::Training && broadcast_buffers_ && module_ != nullptr) {
    parallel_owner_.broadcast_module_buffers(*module_);
  }
  return Placement::forward_context(stage);
}

}  // namespace volt

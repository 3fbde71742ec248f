#include "strategies/buffer_broadcast_placement.h"

#include "distributed/communicator.h"
#include "distributed/flat_buffers.h"

namespace volt {

BufferBroadcastPlacement::BufferBroadcastPlacement(const PartContext& context, const ProcessGroupContext& group,
                                                   bool broadcast_buffers)
    : Placement(context), group_(group), broadcast_buffers_(broadcast_buffers) {}

ScopeGuard BufferBroadcastPlacement::forward_context(RunningStage stage) {
  if (stage == RunningStage::Training && broadcast_buffers_ && module_ != nullptr) broadcast_buffers();
  return Placement::forward_context(stage);
}

void BufferBroadcastPlacement::broadcast_buffers() {
  std::vector<torch::Tensor> buffers;
  for (auto& buffer : module_->buffers()) {
    if (buffer.defined() && buffer.numel() > 0) buffers.push_back(buffer);
  }
  // One broadcast per dtype (buffers are few and small: a flat copy beats a collective each).
  through_flat_buffers(buffers, [this](torch::Tensor& flat) { group_.communicator().broadcast(flat, 0); });
}

}  // namespace volt

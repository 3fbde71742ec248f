#pragma once
// The placement part of DDP and ShardedDDP: rank 0's buffers (BatchNorm statistics) are
// broadcast to every rank before each training forward (broadcast_buffers), as PyTorch's DDP
// does. Only training forwards: evaluation loaders are split unevenly (each sample once), so
// ranks may run different numbers of evaluation steps and a collective there could wait forever.
#include "strategies/part_context.h"
#include "strategies/placement.h"

namespace volt {


class BufferBroadcastPlacement : public Placement {
 public:
  // Broadcasts over `group`'s root communicator (Note [Part context]).
  BufferBroadcastPlacement(const PartContext& context, const ProcessGroupContext& group, bool broadcast_buffers);

  // The module whose buffers are broadcast, from setup_module on; nullptr at teardown.
  void attach(torch::nn::Module* module) { module_ = module; }
  ScopeGuard forward_context(RunningStage stage) override;  // [collective in training]

 private:
  // Rank 0's buffers (e.g. BatchNorm statistics) into every rank's, one flat broadcast per dtype.
  // [collective]
  void broadcast_buffers();

  const ProcessGroupContext& group_;
  bool broadcast_buffers_;
  torch::nn::Module* module_ = nullptr;
};

}  // namespace volt

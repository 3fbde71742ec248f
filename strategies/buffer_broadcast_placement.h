#pragma once
// The placement part of DDP and ShardedDDP: rank 0's buffers (BatchNorm statistics) are
// broadcast to every rank before each training forward (broadcast_buffers), as PyTorch's DDP
// does. Only training forwards: evaluation loaders are split unevenly (each sample once), so
// ranks may run different numbers of evaluation steps and a collective there could wait forever.
#include "strategies/placement.h"

namespace volt {

class ParallelStrategy;

class BufferBroadcastPlacement : public Placement {
 public:
  BufferBroadcastPlacement(ParallelStrategy& owner, bool broadcast_buffers);

  // The module whose buffers are broadcast, from setup_module on; nullptr at teardown.
  void attach(torch::nn::Module* module) { module_ = module; }
  ScopeGuard forward_context(RunningStage stage) override;  // [collective in training]

 private:
  ParallelStrategy& parallel_owner_;
  bool broadcast_buffers_;
  torch::nn::Module* module_ = nullptr;
};

}  // namespace volt

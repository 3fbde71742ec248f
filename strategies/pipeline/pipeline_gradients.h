#pragma once
// The gradients part of the pipeline strategy (Note [The pipeline strategy]): at each
// synchronization the parts of a gradient computed on several stages are summed among them (Note
// [Parameters shared across stages]), then each stage's gradients are averaged over its `dp`
// group (ReplicaGradients), or with data_parallel=fsdp reduce-scattered into its shards (Note [A
// model part sharded over its replicas]), whose clipping then sums every rank's shards.
#include "strategies/mesh_replica_parts.h"

namespace volt {

struct PipelineLayout;

class PipelineGradients : public ReplicaGradients {
 public:
  // `layout`: the strategy's, read when the part acts.
  PipelineGradients(const PartContext& context, ProcessGroupContext& group, const PipelineLayout& layout);
  // [point to point within pp, collective over dp]
  void synchronize_accumulated_gradients(torch::nn::Module& module) override;
  // [collective over every rank with data_parallel=fsdp; OSS's over pp otherwise]
  torch::Tensor clip_norm(torch::optim::Optimizer& optimizer, double max_norm, double norm_type) override;

 private:
  const PipelineLayout& layout_;
};

}  // namespace volt

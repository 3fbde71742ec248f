#pragma once
// The gradients part of the tensor_parallel strategy (Note [The tensor_parallel strategy]): the
// replicas' averaging over `dp` (ReplicaGradients), and clipping by the whole model's norm. A
// split parameter's gradient is a different slice on each rank of a `tp` group, a whole one the
// same on every rank of it, so the norm counts each rank's slices and the whole gradients on the
// group's first rank only, summed over the group (sharded_gradient_norm.h): the norm of the
// whole model's gradients, as one process clips them. With data_parallel=fsdp the gradients are
// reduce-scattered into the shards over `dp` instead of averaged, and the norm counts each rank's
// shards of its slices, and of the whole parameters on the `tp` group's first rank, summed over
// every rank.
#include "strategies/mesh_replica_parts.h"

namespace volt {

class TensorParallelLayout;

class TensorParallelGradients : public ReplicaGradients {
 public:
  // `layout`: the strategy's, read when the part acts (its mesh and split modules).
  TensorParallelGradients(const PartContext& context, ProcessGroupContext& group, const TensorParallelLayout& layout);
  // [collective over tp; over every rank with data_parallel=fsdp]
  torch::Tensor clip_norm(torch::optim::Optimizer& optimizer, double max_norm, double norm_type) override;
  // [collective over dp]
  void synchronize_accumulated_gradients(torch::nn::Module& module) override;

 private:
  const TensorParallelLayout& layout_;
};

}  // namespace volt

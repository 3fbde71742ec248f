#include "strategies/tensor_parallel/tensor_parallel_gradients.h"

#include "strategies/sharded_gradient_norm.h"
#include "strategies/tensor_parallel/tensor_parallel_strategy.h"

namespace volt {

TensorParallelGradients::TensorParallelGradients(const PartContext& context, ProcessGroupContext& group,
                                                 const TensorParallelLayout& layout)
    : ReplicaGradients(context, group, layout.mesh), layout_(layout) {}

torch::Tensor TensorParallelGradients::clip_norm(torch::optim::Optimizer& optimizer, double max_norm,
                                                 double norm_type) {
  if (!layout_.mesh) return ReplicaGradients::clip_norm(optimizer, max_norm, norm_type);
  auto& group = layout_.mesh->group("tp");
  if (layout_.shards) {
    // Each entry's shard, counted where its parameter is: a slice on every tp rank, a whole
    // parameter on the group's first.
    std::vector<torch::Tensor> counted, scaled;
    for (const auto& entry : layout_.shards->flat().entries()) {
      if (!entry.shard.grad().defined()) continue;
      scaled.push_back(entry.shard);
      if (layout_.split_of(entry.parameter) != nullptr || group.rank() == 0) counted.push_back(entry.shard);
    }
    return clip_sharded_grad_norm(counted, scaled, max_norm, norm_type, layout_.mesh->world(), "tensor_parallel");
  }
  std::vector<torch::Tensor> counted, scaled;
  for (auto& param_group : optimizer.param_groups()) {
    for (auto& parameter : param_group.params()) {
      if (!parameter.grad().defined()) continue;
      scaled.push_back(parameter);
      if (layout_.split_of(parameter) != nullptr || group.rank() == 0) counted.push_back(parameter);
    }
  }
  return clip_sharded_grad_norm(counted, scaled, max_norm, norm_type, group, "tensor_parallel");
}

void TensorParallelGradients::synchronize_accumulated_gradients(torch::nn::Module& module) {
  if (!layout_.shards) return ReplicaGradients::synchronize_accumulated_gradients(module);
  layout_.shards->reduce_gradients();
}

}  // namespace volt

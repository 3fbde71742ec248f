#include "strategies/pipeline/pipeline_gradients.h"

#include "strategies/pipeline/pipeline_strategy.h"
#include "strategies/sharded_gradient_norm.h"

namespace volt {

PipelineGradients::PipelineGradients(const PartContext& context, ProcessGroupContext& group,
                                     const PipelineLayout& layout)
    : ReplicaGradients(context, group, layout.mesh), layout_(layout) {}

void PipelineGradients::synchronize_accumulated_gradients(torch::nn::Module& module) {
  if (layout_.shared) layout_.shared->sum_gradients();
  if (!layout_.shards) return ReplicaGradients::synchronize_accumulated_gradients(module);
  if (layout_.shared) {
    // The owner steps a shared parameter; a copy's gradient, summed, has done its part.
    for (auto copy : layout_.shared->copies()) copy.mutable_grad().reset();
  }
  layout_.shards->reduce_gradients();
}

torch::Tensor PipelineGradients::clip_norm(torch::optim::Optimizer& optimizer, double max_norm, double norm_type) {
  if (!layout_.shards) return ReplicaGradients::clip_norm(optimizer, max_norm, norm_type);
  // Every rank's shards are a disjoint part of the model's gradients: each element counted once.
  std::vector<torch::Tensor> shards;
  for (auto& param_group : optimizer.param_groups()) {
    for (auto& parameter : param_group.params()) {
      if (parameter.grad().defined()) shards.push_back(parameter);
    }
  }
  return clip_sharded_grad_norm(shards, shards, max_norm, norm_type, layout_.mesh->world(), "pipeline");
}

}  // namespace volt

#include "strategies/gradient_synchronization.h"

#include <vector>

#include "strategies/gradient_norm.h"
#include "strategies/optimizer_sharding.h"
#include "strategies/sharded_optimizer.h"
#include "strategies/part_context.h"

namespace volt {
namespace {

std::vector<torch::Tensor> parameters_with_grad(torch::optim::Optimizer& optimizer) {
  std::vector<torch::Tensor> params;
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) {
      if (p.grad().defined()) params.push_back(p);
    }
  }
  return params;
}

}  // namespace

void GradientSynchronization::zero_grad(torch::optim::Optimizer& optimizer) {
  torch::NoGradGuard no_grad;
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      if (zero_in_place_) {
        p.mutable_grad().zero_();
      } else {
        p.mutable_grad().reset();
      }
    }
  }
}

torch::Tensor GradientSynchronization::clip_norm(torch::optim::Optimizer& optimizer, double max_norm,
                                                 double norm_type) {
  // Over every rank's shard, each parameter counted once.
  if (const auto* sharding = context().optimizer_sharding()) return sharding->clip_norm(optimizer, max_norm, norm_type);
  return clip_grad_norm(parameters_with_grad(optimizer), max_norm, norm_type);
}

void GradientSynchronization::clip_value(torch::optim::Optimizer& optimizer, double clip_value) {
  torch::nn::utils::clip_grad_value_(parameters_with_grad(optimizer), clip_value);
}

}  // namespace volt

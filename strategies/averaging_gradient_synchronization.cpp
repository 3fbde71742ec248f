#include "strategies/averaging_gradient_synchronization.h"

#include "strategies/averaging/parameter_mean.h"
#include "strategies/dense_gradients.h"
#include "distributed/communicator.h"

namespace volt {

AveragingGradientSynchronization::AveragingGradientSynchronization(const PartContext& context,
                                                                   ProcessGroupContext& group)
    : GradientSynchronization(context), group_(group) {}

void AveragingGradientSynchronization::synchronize_accumulated_gradients(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  auto& comm = group_.gradient_group();
  std::vector<torch::Tensor> params;
  for (const auto& item : module.named_parameters()) {
    if (!item.value().requires_grad()) continue;
    check_dense_gradient(item.value(), item.key(), context().name());  // Note [Sparse gradients]
    params.push_back(item.value());
  }
  auto has_grad = torch::zeros({static_cast<int64_t>(params.size())}, torch::kInt);
  for (size_t i = 0; i < params.size(); ++i) has_grad[static_cast<int64_t>(i)] = params[i].grad().defined() ? 1 : 0;
  comm.all_reduce(has_grad, ReduceOp::Max);
  std::vector<torch::Tensor> grads;
  for (size_t i = 0; i < params.size(); ++i) {
    if (has_grad[static_cast<int64_t>(i)].item<int>() == 0) continue;
    auto& p = params[i];
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    grads.push_back(p.grad());
  }
  averaging::replace_by_mean(grads, comm);  // in place: bucket views stay views
}

}  // namespace volt

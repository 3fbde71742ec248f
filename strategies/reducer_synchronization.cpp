#include "strategies/reducer_synchronization.h"

#include "core/error.h"
#include "strategies/part_context.h"

namespace volt {

BackwardReducer& ReducerSynchronization::reducer() const {
  VOLT_INTERNAL_ASSERT(reducer_ != nullptr, context().name(), ": the reducer is used before the strategy built it");
  return *reducer_;
}

ScopeGuard ReducerSynchronization::no_sync() {
  auto& r = reducer();
  const bool previous = r.require_sync();
  r.set_require_sync(false);
  return ScopeGuard([&r, previous] { r.set_require_sync(previous); });
}

void ReducerSynchronization::pre_backward(const torch::Tensor& loss) { reducer().prepare_for_backward(loss); }

void ReducerSynchronization::post_backward(const torch::Tensor&) { reducer().finalize_backward(); }

void ReducerSynchronization::zero_grad(torch::optim::Optimizer& optimizer) {
  if (!gradients_are_bucket_views_) return GradientSynchronization::zero_grad(optimizer);
  // The gradients are the bucket buffers' views: zero them in place, never drop them.
  torch::NoGradGuard no_grad;
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) {
      if (p.grad().defined()) p.mutable_grad().zero_();
    }
  }
}

void ReducerSynchronization::synchronize_accumulated_gradients(torch::nn::Module& module) {
  if (reducer_ != nullptr && reducer_->reduce_accumulated_gradients()) return;
  AveragingGradientSynchronization::synchronize_accumulated_gradients(module);
}

}  // namespace volt

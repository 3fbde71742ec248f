#pragma once
// The gradients part of the strategies whose backward reduces through a BackwardReducer (DDP's
// Reducer, ShardedDDP's ShardedReducer): each backward is bracketed by prepare_for_backward /
// finalize_backward, no_sync() turns the reducer's synchronization off for the scope, and a
// window closed without backward is reduced by the reducer where it can
// (BackwardReducer::reduce_accumulated_gradients), else averaged as in every ParallelStrategy.
#include "strategies/averaging_gradient_synchronization.h"
#include "strategies/backward_reducer.h"

namespace volt {

class ReducerSynchronization : public AveragingGradientSynchronization {
 public:
  // `gradients_are_bucket_views`: .grad are views into the reducer's buffers (DDP's
  // gradient_as_bucket_view), zeroed in place by zero_grad, never dropped.
  ReducerSynchronization(const PartContext& context, ProcessGroupContext& group,
                         bool gradients_are_bucket_views = false)
      : AveragingGradientSynchronization(context, group), gradients_are_bucket_views_(gradients_are_bucket_views) {}

  // The reducer this part drives, built by the strategy at setup; nullptr at teardown.
  void attach(BackwardReducer* reducer) { reducer_ = reducer; }

  ScopeGuard no_sync() override;
  void pre_backward(const torch::Tensor& loss) override;   // [collective for DDP's reducer]
  void post_backward(const torch::Tensor& loss) override;  // [collective]
  void zero_grad(torch::optim::Optimizer& optimizer) override;
  void synchronize_accumulated_gradients(torch::nn::Module& module) override;  // [collective]

 protected:
  BackwardReducer& reducer() const;

 private:
  bool gradients_are_bucket_views_;
  BackwardReducer* reducer_ = nullptr;
};

}  // namespace volt

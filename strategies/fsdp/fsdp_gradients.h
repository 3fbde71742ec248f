#pragma once
// The gradients part (gradient_synchronization.h) of FSDP: backward opens and closes the units'
// backward (each unit reduce-scatters its flat gradient as its backward ends, through the shared
// bucket); no_sync keeps full gradients until the window's last micro-batch; clipping by norm
// runs over the shards (every element counted on one rank).
#include "strategies/averaging_gradient_synchronization.h"

namespace volt {

class FSDPStrategy;

class FSDPGradients : public AveragingGradientSynchronization {
 public:
  explicit FSDPGradients(FSDPStrategy& owner);

  ScopeGuard no_sync() override;
  void pre_backward(const torch::Tensor& loss) override;
  void post_backward(const torch::Tensor& loss) override;  // [collective]
  // The units reduce the gradients they held back under no_sync. [collective]
  void synchronize_accumulated_gradients(torch::nn::Module& module) override;
  // Needs every parameter of `optimizer` inside a unit (NotSupportedError otherwise). [collective]
  torch::Tensor clip_norm(torch::optim::Optimizer& optimizer, double max_norm, double norm_type) override;

 private:
  FSDPStrategy& fsdp_;
};

}  // namespace volt

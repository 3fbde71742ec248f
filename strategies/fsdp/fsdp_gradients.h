#pragma once
// The gradients part (gradient_synchronization.h) of FSDP: backward opens and closes the units'
// backward (each unit reduce-scatters its flat gradient as its backward ends, through the shared
// bucket); no_sync keeps full gradients until the window's last micro-batch; clipping by norm
// runs over the shards (every element counted on one rank). It acts on the units through the
// strategy's FSDPState (Note [FSDP's state]).
#include <memory>

#include "strategies/averaging_gradient_synchronization.h"
#include "strategies/fsdp/fsdp_state.h"

namespace volt {

class FSDPGradients : public AveragingGradientSynchronization {
 public:
  FSDPGradients(const PartContext& context, ProcessGroupContext& group, std::shared_ptr<fsdp::FSDPState> state);

  ScopeGuard no_sync() override;
  void pre_backward(const torch::Tensor& loss) override;
  void post_backward(const torch::Tensor& loss) override;  // [collective]
  // The units reduce the gradients they held back under no_sync. [collective]
  void synchronize_accumulated_gradients(torch::nn::Module& module) override;
  // Needs every parameter of `optimizer` inside a unit (NotSupportedError otherwise). [collective]
  torch::Tensor clip_norm(torch::optim::Optimizer& optimizer, double max_norm, double norm_type) override;

 private:
  std::shared_ptr<fsdp::FSDPState> state_;
};

}  // namespace volt

#pragma once
// The two numeric kernels of loss scaling, with PyTorch's semantics. On CUDA tensors they call
// PyTorch's fused ops (_amp_foreach_non_finite_check_and_unscale_, _amp_update_scale_); LibTorch
// 1.13 ships those for CUDA only, so CPU tensors go through plain tensor ops here.
#include <torch/torch.h>

#include <vector>

namespace volt {

// For gradients that all live on one device: sets `found_inf` (a one-element float32 tensor on
// that device) to 1 if any element of any gradient is inf or NaN, and multiplies every gradient
// by `inv_scale` (a one-element float32 tensor on that device) in place. found_inf is only ever
// raised, never cleared, so that several calls accumulate into one flag.
void non_finite_check_and_unscale_(const std::vector<torch::Tensor>& grads, torch::Tensor& found_inf,
                                   const torch::Tensor& inv_scale);

// The scale update after an iteration (all tensors one element, on the scale's device):
// found_inf > 0 → scale *= backoff_factor and the tracker restarts; otherwise the tracker counts
// the finite iteration, and on reaching growth_interval scale *= growth_factor (kept unchanged if
// that product is not finite) and the tracker restarts. `scale` is float32, `growth_tracker`
// int32, as in PyTorch.
void update_scale_(torch::Tensor& scale, torch::Tensor& growth_tracker, const torch::Tensor& found_inf,
                   double growth_factor, double backoff_factor, int64_t growth_interval);

}  // namespace volt

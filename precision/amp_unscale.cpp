#include "precision/amp_unscale.h"

#include <cmath>

#include "core/error.h"

namespace volt {

void non_finite_check_and_unscale_(const std::vector<torch::Tensor>& grads, torch::Tensor& found_inf,
                                   const torch::Tensor& inv_scale) {
  if (grads.empty()) return;
  VOLT_INTERNAL_ASSERT(found_inf.numel() == 1 && inv_scale.numel() == 1,
                       "found_inf and inv_scale hold one element each");
  if (found_inf.is_cuda()) {
    at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale);
    return;
  }
  // A 0-dim view, so that multiplying a 0-dim gradient in place keeps its shape.
  const auto factor = inv_scale.reshape({});
  const bool unit_factor = factor.item<float>() == 1.0f;
  bool non_finite = false;
  for (const auto& grad : grads) {
    if (grad.numel() == 0) continue;
    // Checked before multiplying, as the fused kernel does: inv_scale can be 0 only for an
    // infinite scale, which update_scale_ never produces.
    if (!non_finite && !torch::isfinite(grad).all().item<bool>()) non_finite = true;
    if (!unit_factor) grad.mul_(factor);
  }
  if (non_finite) found_inf.fill_(1.0);
}

void update_scale_(torch::Tensor& scale, torch::Tensor& growth_tracker, const torch::Tensor& found_inf,
                   double growth_factor, double backoff_factor, int64_t growth_interval) {
  if (scale.is_cuda()) {
    at::_amp_update_scale_(scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval);
    return;
  }
  // The same float arithmetic as PyTorch's kernel: the product is formed in double, stored as float.
  const float current = scale.item<float>();
  if (found_inf.item<float>() != 0.0f) {
    scale.fill_(static_cast<float>(current * backoff_factor));
    growth_tracker.fill_(0);
    return;
  }
  const int64_t successful = growth_tracker.item<int32_t>() + 1;
  if (successful == growth_interval) {
    const auto grown = static_cast<float>(current * growth_factor);
    if (std::isfinite(grown)) scale.fill_(grown);
    growth_tracker.fill_(0);
  } else {
    growth_tracker.fill_(successful);
  }
}

}  // namespace volt

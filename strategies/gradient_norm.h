#pragma once
// Gradient clipping by norm without reading the norm on the host: the computation of
// torch.nn.utils.clip_grad_norm_ (LibTorch's C++ version reads the norm back with .item() to
// return a double; this one returns the 0-dim tensor), so that a step that clips stays free of
// host synchronizations (Note [Metrics read when asked]).
#include <torch/torch.h>

#include <vector>

namespace volt {

// Scales the gradients of `parameters` (those without one are skipped) by
// min(1, max_norm / (norm + 1e-6)), where norm is the total `norm_type`-norm of the gradients,
// the same kernels as torch.nn.utils.clip_grad_norm_. Returns the norm before clipping (0-dim, on
// the gradients' device; a CPU zero when no parameter has a gradient).
torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& parameters, double max_norm, double norm_type = 2.0);

}  // namespace volt

#include "strategies/sharded_gradient_norm.h"

#include <cmath>

#include "core/error.h"

namespace volt {

torch::Tensor clip_sharded_grad_norm(const std::vector<torch::Tensor>& counted,
                                     const std::vector<torch::Tensor>& scaled, double max_norm, double norm_type,
                                     Communicator& communicator, const std::string& owner) {
  check<ConfigurationError>(max_norm > 0 && norm_type > 0, owner, ": expected max_norm and norm_type > 0, got ",
                            max_norm, " and ", norm_type);
  const bool infinity = std::isinf(norm_type);
  // Σ |g|^p (max |g| for the inf-norm) of this rank's part, in float64 on the gradients' device.
  torch::Tensor mine;
  for (const auto& parameter : counted) {
    const auto& grad = parameter.grad();
    if (!grad.defined()) continue;
    const auto norm =
        at::linalg_vector_norm(grad.detach(), norm_type, c10::nullopt, false, c10::nullopt).to(torch::kDouble);
    const auto term = infinity ? norm : norm.pow(norm_type);
    mine = !mine.defined() ? term : infinity ? torch::maximum(mine, term) : mine + term;
  }
  torch::Tensor total = mine.defined() ? mine.reshape({1}).contiguous() : torch::zeros({1}, torch::kDouble);
  communicator.all_reduce(total, infinity ? ReduceOp::Max : ReduceOp::Sum);
  const auto norm = (infinity ? total : total.pow(1.0 / norm_type)).reshape({});
  // Divided, not multiplied by a reciprocal: the coefficient the host computed before.
  const auto coefficient = torch::full_like(norm, max_norm).div(norm + 1e-6).clamp_max(1.0);
  torch::NoGradGuard no_grad;
  for (const auto& parameter : scaled) {
    if (parameter.grad().defined()) parameter.grad().mul_(coefficient.to(parameter.grad().device()));
  }
  return norm;
}

}  // namespace volt

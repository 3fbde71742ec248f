#include "strategies/sharded_gradient_norm.h"

#include <cmath>

#include "core/error.h"

namespace volt {

double clip_sharded_grad_norm(const std::vector<torch::Tensor>& counted, const std::vector<torch::Tensor>& scaled,
                              double max_norm, double norm_type, Communicator& communicator, const std::string& owner) {
  check<ConfigurationError>(max_norm > 0 && norm_type > 0, owner, ": expected max_norm and norm_type > 0, got ",
                            max_norm, " and ", norm_type);
  const bool infinity = std::isinf(norm_type);
  double mine = 0;
  for (const auto& parameter : counted) {
    const auto& grad = parameter.grad();
    if (!grad.defined()) continue;
    const double norm =
        at::linalg_vector_norm(grad.detach(), norm_type, c10::nullopt, false, c10::nullopt).item<double>();
    mine = infinity ? std::max(mine, norm) : mine + std::pow(norm, norm_type);
  }
  auto total = torch::tensor({mine}, torch::kDouble);
  communicator.all_reduce(total, infinity ? ReduceOp::Max : ReduceOp::Sum);
  const double norm = infinity ? total.item<double>() : std::pow(total.item<double>(), 1.0 / norm_type);
  const double coefficient = max_norm / (norm + 1e-6);
  if (coefficient < 1.0) {
    torch::NoGradGuard no_grad;
    for (const auto& parameter : scaled) {
      if (parameter.grad().defined()) parameter.grad().mul_(coefficient);
    }
  }
  return norm;
}

}  // namespace volt

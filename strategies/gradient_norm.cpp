#include "strategies/gradient_norm.h"

#include <limits>

namespace volt {

torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& parameters, double max_norm, double norm_type) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : parameters) {
    if (p.grad().defined()) grads.push_back(p.grad().detach());
  }
  if (grads.empty()) return torch::zeros({});
  torch::Tensor total;
  if (norm_type == std::numeric_limits<double>::infinity()) {
    std::vector<torch::Tensor> norms;
    for (const auto& g : grads) norms.push_back(g.abs().max());
    total = norms.size() == 1 ? norms[0] : torch::max(torch::stack(norms));
  } else if (norm_type == 0) {
    total = torch::full({}, static_cast<double>(grads.size()));
  } else {
    std::vector<torch::Tensor> norms;
    for (const auto& g : grads) norms.push_back(g.norm(norm_type));
    total = norms.size() == 1 ? norms[0] : torch::stack(norms).norm(norm_type);
  }
  const auto coefficient = torch::clamp(max_norm / (total + 1e-6), c10::nullopt, 1.0);
  torch::NoGradGuard no_grad;
  for (auto& g : grads) g.mul_(coefficient);
  return total;
}

}  // namespace volt

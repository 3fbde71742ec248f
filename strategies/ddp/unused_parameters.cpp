#include "strategies/ddp/unused_parameters.h"

#include <torch/csrc/autograd/function.h>

#include <unordered_set>

namespace volt::ddp {

std::vector<size_t> unreachable_accumulators(
    const torch::Tensor& loss, const std::vector<std::shared_ptr<torch::autograd::Node>>& accumulators) {
  std::unordered_set<const torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> stack;
  if (loss.defined() && loss.grad_fn()) {
    stack.push_back(loss.grad_fn().get());
    seen.insert(stack.back());
  }
  while (!stack.empty()) {
    auto* node = stack.back();
    stack.pop_back();
    for (const auto& edge : node->next_edges()) {
      auto* next = edge.function.get();
      if (next != nullptr && seen.insert(next).second) stack.push_back(next);
    }
  }
  std::vector<size_t> unreachable;
  for (size_t i = 0; i < accumulators.size(); ++i) {
    if (!seen.count(accumulators[i].get())) unreachable.push_back(i);
  }
  return unreachable;
}

}  // namespace volt::ddp

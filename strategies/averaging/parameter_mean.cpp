#include "strategies/averaging/parameter_mean.h"

#include <map>

namespace volt::averaging {

void replace_by_mean(const std::vector<torch::Tensor>& parameters, Communicator& group) {
  if (group.size() == 1 || parameters.empty()) return;
  torch::NoGradGuard no_grad;
  // std::map: the same dtype order on every rank, so the all_reduces match.
  std::map<c10::ScalarType, std::vector<torch::Tensor>> by_dtype;
  for (const auto& p : parameters) by_dtype[p.scalar_type()].push_back(p);
  for (auto& [dtype, members] : by_dtype) {
    std::vector<torch::Tensor> flat_parts;
    for (const auto& p : members) flat_parts.push_back(p.detach().reshape(-1));
    auto flat = torch::cat(flat_parts);
    flat.div_(static_cast<double>(group.size()));
    group.all_reduce(flat, ReduceOp::Sum);
    int64_t offset = 0;
    for (auto& p : members) {
      p.detach().copy_(flat.narrow(0, offset, p.numel()).view(p.sizes()));
      offset += p.numel();
    }
  }
}

}  // namespace volt::averaging

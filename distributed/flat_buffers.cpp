#include "distributed/flat_buffers.h"

#include <map>

namespace volt {

void through_flat_buffers(const std::vector<torch::Tensor>& tensors,
                          const std::function<void(torch::Tensor& flat)>& collective) {
  if (tensors.empty()) return;
  torch::NoGradGuard no_grad;
  // std::map: the same dtype order on every rank, so the collectives match.
  std::map<c10::ScalarType, std::vector<torch::Tensor>> by_dtype;
  for (const auto& t : tensors) by_dtype[t.scalar_type()].push_back(t);
  for (auto& [dtype, members] : by_dtype) {
    std::vector<torch::Tensor> flat_parts;
    for (const auto& t : members) flat_parts.push_back(t.detach().reshape(-1));
    auto flat = torch::cat(flat_parts);
    collective(flat);
    int64_t offset = 0;
    for (auto& t : members) {
      t.detach().copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  }
}

}  // namespace volt

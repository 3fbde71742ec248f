#include "strategies/sharded/partition.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace volt {

namespace {

// Nobody owns anything yet: owner -1 everywhere, no elements, nothing owned.
Partition unowned(const std::vector<std::vector<torch::Tensor>>& groups, int64_t world_size) {
  Partition partition;
  partition.elements.assign(static_cast<size_t>(world_size), 0);
  partition.owned.assign(static_cast<size_t>(world_size), std::vector<std::vector<size_t>>(groups.size()));
  for (const auto& params : groups) partition.owner.emplace_back(params.size(), -1);
  return partition;
}

}  // namespace

Partition partition_parameters(const std::vector<std::vector<torch::Tensor>>& groups, int64_t world_size) {
  Partition partition = unowned(groups, world_size);
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& params = groups[g];
    std::vector<size_t> order(params.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return params[a].numel() > params[b].numel(); });
    for (const size_t i : order) {
      if (!params[i].requires_grad()) continue;
      const auto least = std::min_element(partition.elements.begin(), partition.elements.end());
      const auto rank = static_cast<size_t>(least - partition.elements.begin());
      partition.owner[g][i] = static_cast<int64_t>(rank);
      partition.owned[rank][g].push_back(i);
      *least += params[i].numel();
    }
  }
  return partition;
}

Partition partition_by_owner(const std::vector<std::vector<torch::Tensor>>& groups, int64_t world_size,
                             const std::function<int64_t(const torch::Tensor&)>& owner_of) {
  Partition partition = unowned(groups, world_size);
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& params = groups[g];
    for (size_t i = 0; i < params.size(); ++i) {
      if (!params[i].requires_grad()) continue;
      const int64_t rank = owner_of(params[i]);
      VOLT_INTERNAL_ASSERT(rank < world_size, "partition_by_owner: owner ", rank, " of ", world_size, " ranks");
      if (rank < 0) continue;
      partition.owner[g][i] = rank;
      partition.owned[static_cast<size_t>(rank)][g].push_back(i);
      partition.elements[static_cast<size_t>(rank)] += params[i].numel();
    }
  }
  return partition;
}

}  // namespace volt

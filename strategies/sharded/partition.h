#pragma once
// Which rank owns which parameter under optimizer-state sharding (ZeRO, Rajbhandari et al., SC'20):
// each parameter group's parameters are distributed whole, greedily balancing element counts —
// PyTorch's ZeroRedundancyOptimizer rule: within each group, parameters sorted by size (largest
// first, ties in group order), each given to the rank with the fewest elements so far (counting
// every group before it; the lowest rank on ties). fairscale's OSS keeps group order instead; the
// sorted order balances better. Deterministic: every rank computes the same partition.
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace volt {

struct Partition {
  // owner[g][i]: the rank that owns parameter i of group g (group order as given).
  std::vector<std::vector<int64_t>> owner;
  // Per rank, per group: the indices (into the group) it owns, in the order the rule assigned them
  // (the order of the rank's local optimizer's groups).
  std::vector<std::vector<std::vector<size_t>>> owned;
  // Elements per rank.
  std::vector<int64_t> elements;
};

// Partitions `groups` (each a list of parameters) over `world_size` ranks. Parameters that do not
// require grad are left out (owner -1): nobody steps them.
Partition partition_parameters(const std::vector<std::vector<torch::Tensor>>& groups, int64_t world_size);

// The partition in which `owner_of` names each parameter's rank (-1: nobody steps it); a
// parameter that does not require grad is left out as above. Owners must be below `world_size`.
Partition partition_by_owner(const std::vector<std::vector<torch::Tensor>>& groups, int64_t world_size,
                             const std::function<int64_t(const torch::Tensor&)>& owner_of);

}  // namespace volt

// The ZeRO partition: PyTorch's ZeroRedundancyOptimizer rule (largest first, ties in group order,
// to the rank with the fewest elements so far across groups), parameters without grad left out.
#include <gtest/gtest.h>

#include "strategies/sharded/partition.h"

namespace volt {
namespace {

torch::Tensor param(int64_t numel, bool trainable = true) { return torch::zeros({numel}).requires_grad_(trainable); }

TEST(Partition, LargestFirstToTheLeastLoadedRankAcrossGroups) {
  // Group 0: sizes 5, 9, 5, 2 → sorted 9 (r0), 5 (r1), 5 (r1: 5 < 9), 2 (r0: 9 < 10).
  // After group 0: r0 holds 11, r1 10. Group 1: sizes 4, 7 → 7 (r1), 4 (r0).
  const auto p = partition_parameters({{param(5), param(9), param(5), param(2)}, {param(4), param(7)}}, 2);
  EXPECT_EQ(p.owner[0], (std::vector<int64_t>{1, 0, 1, 0}));
  EXPECT_EQ(p.owner[1], (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(p.owned[0][0], (std::vector<size_t>{1, 3}));
  EXPECT_EQ(p.owned[1][0], (std::vector<size_t>{0, 2}));
  EXPECT_EQ(p.elements, (std::vector<int64_t>{15, 17}));
}

TEST(Partition, FrozenParametersHaveNoOwner) {
  const auto p = partition_parameters({{param(5), param(100, false), param(3)}}, 3);
  EXPECT_EQ(p.owner[0], (std::vector<int64_t>{0, -1, 1}));
  EXPECT_EQ(p.elements, (std::vector<int64_t>{5, 3, 0}));
}

}  // namespace
}  // namespace volt

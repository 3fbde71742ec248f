// Samplers: DistributedSampler follows torch.utils.data.DistributedSampler (equal counts per
// rank, padding by repeating the head, per-epoch seeds, the very same order as PyTorch), and the
// unpadded evaluation sampler counts every sample exactly once.
#include <gtest/gtest.h>

#include <set>
#include <sstream>

#include "core/error.h"
#include "tests/support/test_support.h"
#include "data/data_loader.h"
#include "data/sampler.h"

namespace volt {
namespace {

TEST(DistributedSampler, RanksGetEqualCountsThatCoverEverySample) {
  for (int64_t world : {2, 3, 4}) {
    for (int64_t n : {10, 11, 12}) {
      std::multiset<int64_t> all;
      for (int64_t rank = 0; rank < world; ++rank) {
        DistributedSampler sampler(n, world, rank, /*shuffle=*/true, /*seed=*/3, /*drop_last=*/false);
        const auto indices = sampler.indices(0);
        EXPECT_EQ(static_cast<int64_t>(indices.size()), (n + world - 1) / world);
        all.insert(indices.begin(), indices.end());
      }
      for (int64_t i = 0; i < n; ++i) EXPECT_GE(all.count(i), 1u) << "sample " << i << " world " << world;
      EXPECT_EQ(static_cast<int64_t>(all.size()), world * ((n + world - 1) / world));
    }
  }
}

TEST(DistributedSampler, DropLastGivesDisjointPartitions) {
  std::set<int64_t> seen;
  for (int64_t rank = 0; rank < 3; ++rank) {
    DistributedSampler sampler(11, 3, rank, true, 0, /*drop_last=*/true);
    for (auto i : sampler.indices(2)) EXPECT_TRUE(seen.insert(i).second) << "sample " << i << " twice";
  }
  EXPECT_EQ(seen.size(), 9u);
}

TEST(DistributedSampler, EachEpochHasItsOwnOrderReproducibly) {
  DistributedSampler sampler(100, 2, 0, true, 5, false);
  EXPECT_NE(sampler.indices(0), sampler.indices(1));
  EXPECT_EQ(sampler.indices(1), DistributedSampler(100, 2, 0, true, 5, false).indices(1));
}

TEST(DistributedSampler, MatchesPyTorchsOrder) {
  // torch.utils.data.DistributedSampler(range(10), num_replicas=3, rank=r, shuffle=True, seed=5)
  // at epoch 1, from Debian's PyTorch.
  const auto result = testing::run_command(
      testing::reference_python() + " -c \"import torch.utils.data as d\n"
      "for r in range(3):\n"
      "  s = d.DistributedSampler(range(10), num_replicas=3, rank=r, shuffle=True, seed=5)\n"
      "  s.set_epoch(1)\n"
      "  print(' '.join(map(str, s)))\"",
      120);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  std::istringstream lines(result.output);
  for (int64_t rank = 0; rank < 3; ++rank) {
    std::string line;
    std::getline(lines, line);
    std::ostringstream ours;
    const auto indices = DistributedSampler(10, 3, rank, true, 5, false).indices(1);
    for (size_t i = 0; i < indices.size(); ++i) ours << (i ? " " : "") << indices[i];
    EXPECT_EQ(ours.str(), line) << "rank " << rank;
  }
}

// The rest of an epoch from position k*R*B is exactly what batches k, k+1, ... of the whole epoch
// hold, padding and drop_last included: what a plain resume draws.
TEST(DistributedSampler, TheRestFromAStepBoundaryIsTheTailOfTheWholeEpoch) {
  for (const bool drop_last : {false, true}) {
    for (int64_t world : {1, 2, 3}) {
      for (int64_t rank = 0; rank < world; ++rank) {
        const int64_t n = 23, batch = 2, steps_done = 2;
        const auto whole = DistributedSampler(n, world, rank, true, 5, drop_last).indices(4);
        const auto rest = DistributedSampler(n, world, rank, true, 5, drop_last, steps_done * world * batch).indices(4);
        ASSERT_GE(whole.size(), static_cast<size_t>(steps_done * batch));
        EXPECT_EQ(rest, std::vector<int64_t>(whole.begin() + steps_done * batch, whole.end()))
            << "world " << world << " rank " << rank << " drop_last " << drop_last;
      }
    }
  }
}

// Dealt from any position, the ranks together take the epoch's order from there on, in order
// (position p goes to rank p mod R), whatever consumed the head.
TEST(DistributedSampler, TheRestFromAnyPositionContinuesTheEpochsOrder) {
  const int64_t n = 20, first = 7, world = 3;
  const auto order = epoch_order(n, /*shuffle=*/true, /*seed=*/9, /*epoch=*/1);
  std::vector<std::vector<int64_t>> shares;
  for (int64_t rank = 0; rank < world; ++rank) {
    shares.push_back(DistributedSampler(n, world, rank, true, 9, false, first).indices(1));
    EXPECT_EQ(shares.back().size(), 5u);  // 13 samples over 3 ranks: 15 with the head's 2 repeated
  }
  for (int64_t p = 0; p < 15; ++p) {
    const int64_t expected = first + p < n ? order[static_cast<size_t>(first + p)] : order[static_cast<size_t>(first + p - n)];
    EXPECT_EQ(shares[static_cast<size_t>(p % world)][static_cast<size_t>(p / world)], expected) << "position " << p;
  }
  EXPECT_EQ(epoch_order(n, true, 9, 1), RandomSampler(n, 9).indices(1)) << "one process draws the same order";
  EXPECT_THROW(DistributedSampler(n, world, 0, true, 9, false, n + 1), ConfigurationError);
}

TEST(UnpaddedDistributedSampler, CountsEverySampleExactlyOnce) {
  std::multiset<int64_t> all;
  for (int64_t rank = 0; rank < 3; ++rank) {
    const auto indices = UnpaddedDistributedSampler(10, 3, rank).indices(0);
    all.insert(indices.begin(), indices.end());
  }
  EXPECT_EQ(all.size(), 10u);
  for (int64_t i = 0; i < 10; ++i) EXPECT_EQ(all.count(i), 1u);
}

TEST(DataLoader, BatchesFollowTheSamplerAndTheEpoch) {
  auto dataset = std::make_shared<TensorDataset>(torch::arange(10).to(torch::kFloat).unsqueeze(1),
                                                 torch::arange(10));
  DataLoader loader(dataset, {.batch_size = 4, .shuffle = false});
  EXPECT_EQ(loader.num_batches(), 3);
  EXPECT_EQ(loader.batch(2).size(), 2);
  EXPECT_TRUE(torch::equal(loader.batch(1).target, torch::arange(4, 8)));
  loader.set_sampler(std::make_shared<DistributedSampler>(10, 2, 1, false, 0, false));
  EXPECT_EQ(loader.num_batches(), 2);  // 5 samples of rank 1: 1 3 5 7 9
  EXPECT_TRUE(torch::equal(loader.batch(0).target, torch::tensor({1, 3, 5, 7}).to(torch::kLong)));
}

}  // namespace
}  // namespace volt

// TensorDataset's batches (Note [Batches of tensors on the GPU] in data/dataset.cpp): the same
// rows whichever path serves them (one slice for consecutive indices, a gather otherwise), and
// copies, so that a step changing its batch in place leaves the dataset alone.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "data/dataset.h"

namespace {

TEST(TensorDataset, EveryIndexPatternGivesTheRowsItNames) {
  const auto input = torch::arange(40, torch::kFloat).view({10, 4});
  const auto target = torch::arange(10, torch::kLong);
  volt::TensorDataset dataset(input, target, {{"weight", torch::arange(10, torch::kDouble)}});
  const std::vector<std::vector<int64_t>> patterns = {{3, 4, 5, 6}, {0}, {2, 1, 0}, {4, 4, 5}, {1, 3, 5}, {7, 8, 9}};
  for (const auto& indices : patterns) {
    const auto batch = dataset.get_batch({indices});
    const auto index = torch::tensor(indices, torch::kLong);
    EXPECT_TRUE(batch.input.equal(input.index_select(0, index))) << "indices " << index;
    EXPECT_TRUE(batch.target.equal(target.index_select(0, index))) << "indices " << index;
    EXPECT_TRUE(batch.extras.at("weight").equal(torch::arange(10, torch::kDouble).index_select(0, index)));
  }
}

TEST(TensorDataset, ABatchChangedInPlaceLeavesTheDatasetAlone) {
  const auto input = torch::arange(40, torch::kFloat).view({10, 4});
  volt::TensorDataset dataset(input, torch::arange(10, torch::kLong));
  for (const auto& indices : std::vector<std::vector<int64_t>>{{2, 3, 4}, {4, 2}}) {
    dataset.get_batch({indices}).input.mul_(-1);
    EXPECT_TRUE(dataset.get_batch({{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}}).input.equal(torch::arange(40, torch::kFloat).view({10, 4})));
  }
}

}  // namespace

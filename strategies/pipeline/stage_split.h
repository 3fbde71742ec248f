#pragma once
// Where a pipeline cuts a Sequential into stages: contiguous runs of its entries, one per stage,
// balanced by parameter count (the largest stage as small as it can be, PyTorch's pipelining and
// torchtitan balance the same way by default), or at entries the user names.
#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace volt::pipeline {

// The first entry of every stage (stage s runs entries [begin[s], begin[s+1]), the last to the
// end) for `stages` stages over entries holding `parameters[i]` elements each: every stage gets
// at least one entry, and the largest stage's parameter count is the least any such split has
// (ties: the earliest boundaries). ConfigurationError when there are fewer entries than stages.
std::vector<int64_t> balanced_stage_starts(const std::vector<int64_t>& parameters, int64_t stages);

// `starts` checked as a split of `entries` entries into stages: begins at 0, strictly
// increasing, inside the Sequential (ConfigurationError naming the fix otherwise).
void check_stage_starts(const std::vector<int64_t>& starts, int64_t entries);

// The entries of `sequential` stage `stage` runs under `starts`, as a Sequential of the same
// modules (shared, not copied).
torch::nn::Sequential stage_of(const torch::nn::Sequential& sequential, const std::vector<int64_t>& starts,
                               int64_t stage);

// The parameter elements of each entry of `sequential`.
std::vector<int64_t> entry_parameter_counts(const torch::nn::Sequential& sequential);

}  // namespace volt::pipeline

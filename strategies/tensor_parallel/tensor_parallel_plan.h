#pragma once
// A tensor-parallel plan (PyTorch's parallelize_module's parallelize_plan, in volt's text): which
// modules of the model are split across the ranks of a `tp` group, and how.
//
//   "body.0:colwise|body.2:rowwise"      "blocks.*.fc:colwise|blocks.*.proj:rowwise"
//
// Each entry is a module path (named_modules()' names; `*` matches any one component) and a style:
//   colwise  a Linear's output features split: weight and bias sharded on dim 0; the input
//            replicated, the output this rank's slice of the last dimension (ColwiseParallel)
//   rowwise  a Linear's input features split: weight sharded on dim 1, bias whole; the input this
//            rank's slice of the last dimension, the output summed over the group (RowwiseParallel)
//            on an Embedding: its rows (the vocabulary) split, the lookups summed over the group
//   colwise:N  a Linear whose output is N projections side by side (a fused q|k|v: 3): each of
//            its N parts split as colwise splits a whole output, so that rank r holds the r-th
//            slice of every part, side by side in the same order
// A colwise linear followed by a rowwise one (an MLP, attention's projections) needs one
// all-reduce forward and one backward (Megatron-LM's f and g).
#include <cstdint>
#include <string>
#include <vector>

namespace volt::tp {

enum class ParallelStyle { Colwise, Rowwise };

struct PlanEntry {
  std::string pattern;  // "blocks.*.fc"
  ParallelStyle style;
  int64_t fused = 1;  // colwise:N: the output's N fused projections, each split
};

// Throws ConfigurationError naming the fix for an empty plan, an entry without ':', an empty
// path or component, an unknown style, or a fused count that is not a number >= 1 or follows rowwise.
std::vector<PlanEntry> parse_tensor_parallel_plan(const std::string& text);
std::string to_string(ParallelStyle style);
std::string to_string(const PlanEntry& entry);  // as the plan writes it
// Whether module path `path` ("blocks.3.fc") matches `pattern` ("blocks.*.fc").
bool path_matches(const std::string& pattern, const std::string& path);

}  // namespace volt::tp

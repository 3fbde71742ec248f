#pragma once
// Note [A module split across a group]
// A module of the model split by a tensor-parallel plan (tensor_parallel_plan.h): it keeps its name
// and its parameter objects, but each split parameter now holds this rank's slice, rows or
// columns [r·n/T, (r+1)·n/T) of the split dimension (of each part of it, for a fused projection:
// colwise:N), and its calls (volt::call, or as a
// Sequential entry routed through it) run the split forward, a ForwardWrapper, instead of the
// module's own. The kinds: ParallelLinear (parallel_linear.h) and ParallelEmbedding
// (parallel_embedding.h). `slice_of()` cuts a whole value (a checkpoint's, an optimizer state's)
// into this rank's slice, `gathered()` puts the ranks' slices back together, `restore()` makes
// the parameters whole again.
#include <torch/torch.h>

#include <string>
#include <vector>

#include "distributed/communicator.h"
#include "nn/module_call.h"
#include "strategies/tensor_parallel/tensor_parallel_plan.h"

namespace volt::tp {

class SplitModule : public ForwardWrapper {
 public:
  SplitModule(std::string path, ParallelStyle style, Communicator& group)
      : path_(std::move(path)), style_(style), group_(group) {}

  int depth() const override { return kUnitDepth; }
  const std::string& path() const { return path_; }
  ParallelStyle style() const { return style_; }
  // The dimension `parameter` is split on; -1: whole on every rank (or every parameter once
  // restore() ran), or not this module's.
  int64_t split_dimension(const torch::Tensor& parameter) const;
  // The parameters this module holds split (before restore()).
  std::vector<torch::Tensor> split_parameters() const;
  // The whole shape of one of this module's parameters.
  std::vector<int64_t> whole_shape(const torch::Tensor& parameter) const;
  // This rank's slice of `whole`, a value of `parameter`'s whole shape. [local]
  torch::Tensor slice_of(const torch::Tensor& parameter, const torch::Tensor& whole) const;
  // `slice`, this rank's slice of a value shaped like `parameter`, gathered whole from every rank.
  // [collective over the group for a split parameter]
  torch::Tensor gathered(const torch::Tensor& parameter, const torch::Tensor& slice) const;
  // Puts the whole parameters back. [collective over the group]
  void restore();
  // How many times the split forward ran: a planned module called around volt::call never runs it.
  int64_t calls() const { return calls_; }

 protected:
  // Registers `parameter` (split on `dim`, or whole: -1) and, when split, keeps this rank's slice
  // of it: of each of `parts` equal parts of `dim` (a fused projection's, colwise:N), this rank's
  // slice, side by side. Throws ConfigurationError naming the module when `dim`'s size does not
  // divide by parts x the group's size; `what` names that size in the message ("output features").
  void split(torch::Tensor& parameter, int64_t dim, const std::string& what, int64_t parts = 1);
  void count_call() { ++calls_; }
  Communicator& group() const { return group_; }

 private:
  struct Split {
    torch::Tensor parameter;
    int64_t dim;
    std::vector<int64_t> whole;
    int64_t parts;
  };
  const Split* find(const torch::Tensor& parameter) const;

  std::string path_;
  ParallelStyle style_;
  Communicator& group_;
  std::vector<Split> splits_;
  bool restored_ = false;
  int64_t calls_ = 0;
};

}  // namespace volt::tp

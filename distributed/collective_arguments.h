#pragma once
// What a collective checks of its arguments before anything reaches a transport. Each check
// throws ConfigurationError naming the group, the collective (`what`), what it got and what to do.
// Private to distributed/.
#include <torch/torch.h>

#include <string>
#include <vector>

#include "distributed/reduce_op.h"

namespace volt {

class CollectiveArguments {
 public:
  // `group` names the communicator in errors, `size` is its number of ranks; `device_bound`: the
  // backend takes tensors on `device` only (nccl, Note [NCCL and this rank's device]).
  CollectiveArguments(std::string group, int64_t size, bool device_bound, torch::Device device);

  // A defined, dense tensor (on the bound device, where there is one).
  void tensor(const torch::Tensor& tensor, const char* what) const;
  // Mean only for floating-point tensors.
  void mean(const torch::Tensor& tensor, ReduceOp op, const char* what) const;
  // `output` must be a contiguous tensor of `input`'s dtype and device with `numel` elements
  // (`rule` says how that number follows from the input, in the message).
  void output(const torch::Tensor& output, const torch::Tensor& input, int64_t numel, const char* what,
              const char* rule) const;
  // `flat` (contiguous) cut by `counts`: one count per rank, none negative, summing to its numel.
  void chunks(const torch::Tensor& flat, const std::vector<int64_t>& counts, const char* what) const;
  // A rank of the group.
  void root(int64_t root, const char* what) const;
  // A rank of the group other than `self` (a point-to-point peer).
  void peer(int64_t peer, int64_t self, const char* what) const;

 private:
  std::string group_;
  int64_t size_;
  bool device_bound_;
  torch::Device device_;
};

}  // namespace volt

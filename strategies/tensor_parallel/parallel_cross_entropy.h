#pragma once
// Cross-entropy over logits split by vocabulary across a tensor-parallel group (Megatron-LM's
// vocab_parallel_cross_entropy; PyTorch's loss_parallel()): the output of a colwise language-model
// head is each rank's slice of the vocabulary, and the loss needs only three all-reduces of one
// number per row (the rows' maximum, their sum of exponentials, the target's logit) instead of
// gathering the whole [rows, vocabulary] logits on every rank.
//
//   auto loss = volt::tp::cross_entropy(logits.view({-1, V_here}), batch.target.view({-1}), vocab_size);
//
// Inside a tensor_parallel step (which sets the active group, ActiveTensorParallelGroup) on logits
// with vocab_size / T columns it is the split loss; on logits with vocab_size columns (every other
// strategy, or a head the plan leaves whole) it is torch's cross_entropy: the same module code
// runs under both. Mean over the rows; every target in [0, vocab_size).
#include <torch/torch.h>

#include "core/scope_guard.h"
#include "distributed/communicator.h"

namespace volt::tp {

// The tensor-parallel group of the step running on this thread (tensor_parallel's run_step sets
// it); none outside one.
class ActiveTensorParallelGroup {
 public:
  static Communicator* get();
  // Makes `group` the active one until the guard ends.
  static ScopeGuard activate(Communicator& group);
};

// `logits` [rows, columns], `target` [rows] (int64). Throws ConfigurationError when `columns` is
// neither `vocab_size` nor vocab_size / T for the active group's T.
torch::Tensor cross_entropy(const torch::Tensor& logits, const torch::Tensor& target, int64_t vocab_size);

}  // namespace volt::tp

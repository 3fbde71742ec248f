#pragma once
// A torch::nn::Embedding split across a group by its vocabulary (Note [A module split across a
// group]; Megatron-LM's VocabParallelEmbedding, PyTorch's RowwiseParallel on an Embedding): style
// rowwise, the table's rows [r·V/T, (r+1)·V/T) on rank r. Each rank looks up the ids in its rows
// (zeros for the others) and the sum over the group leaves the parallel region: every rank ends
// with the whole lookup, and each row's gradient reaches only the rank that holds it.
#include "strategies/tensor_parallel/split_module.h"

namespace volt::tp {

class ParallelEmbedding : public SplitModule {
 public:
  // Splits `embedding`'s table in place for `group`. Throws ConfigurationError, naming `path`,
  // for a colwise style, a vocabulary that does not divide by the group's size, or options the
  // split lookup does not keep (padding_idx, max_norm, sparse).
  ParallelEmbedding(torch::nn::EmbeddingImpl& embedding, std::string path, ParallelStyle style, Communicator& group);

  torch::Tensor around(torch::nn::Module& module, const std::vector<torch::Tensor>& tensors,
                       const ModuleForward& forward, bool tensors_complete) override;

 private:
  torch::nn::EmbeddingImpl& embedding_;
};

}  // namespace volt::tp

#include "strategies/tensor_parallel/parallel_embedding.h"

#include "core/error.h"
#include "strategies/tensor_parallel/group_autograd.h"

namespace volt::tp {

ParallelEmbedding::ParallelEmbedding(torch::nn::EmbeddingImpl& embedding, std::string path, ParallelStyle style,
                                     Communicator& group)
    : SplitModule(std::move(path), style, group), embedding_(embedding) {
  check<ConfigurationError>(style == ParallelStyle::Rowwise, "tensor_parallel: ", this->path(), " is an Embedding; ",
                            "split it by its vocabulary with rowwise (colwise is for linears)");
  const auto& options = embedding_.options;
  check<ConfigurationError>(!options.padding_idx() && !options.max_norm() && !options.sparse(),
                            "tensor_parallel: ", this->path(),
                            " is built with padding_idx, max_norm or sparse, which its split lookup does ",
                            "not keep; build it without them or leave it out of the plan");
  split(embedding_.weight, 0, "rows (its vocabulary)");
}

torch::Tensor ParallelEmbedding::around(torch::nn::Module& module, const std::vector<torch::Tensor>& tensors,
                                        const ModuleForward& forward, bool tensors_complete) {
  check<ConfigurationError>(tensors.size() == 1, "tensor_parallel: ", path(), " is called with ", tensors.size(),
                            " tensors; a split Embedding takes the ids");
  count_call();
  const auto& ids = tensors[0];
  const int64_t rows = embedding_.weight.size(0), first = group().rank() * rows;
  const auto elsewhere = (ids < first).logical_or(ids >= first + rows);
  const auto local = (ids - first).masked_fill(elsewhere, 0);
  const auto looked_up = torch::nn::functional::embedding(local, embedding_.weight);
  return leave_parallel_region(looked_up.masked_fill(elsewhere.unsqueeze(-1), 0), group());
}

}  // namespace volt::tp

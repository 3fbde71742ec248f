#pragma once
#include <torch/torch.h>

#include <vector>

namespace volt {

class StrategyCollectives;

// Every rank's `tensor`, in rank order, bit for bit. `tensor` must have the same shape and dtype
// on every rank. Built on the strategy's all_reduce alone: each rank writes its bytes into its
// own row of a zero int32 matrix, and the integer sum over ranks is exact. For per-rank state in
// a full checkpoint (random states, gradients of an open accumulation window): it moves
// world_size × the tensor's bytes (× 4 when the byte count is not a multiple of 4). On one
// process it returns {tensor} without communicating. [collective]
std::vector<torch::Tensor> gather_from_ranks(StrategyCollectives& strategy, const torch::Tensor& tensor);

}  // namespace volt

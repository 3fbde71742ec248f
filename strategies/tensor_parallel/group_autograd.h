#pragma once
// The two collectives of tensor parallelism as autograd functions over a group (Megatron-LM's f and
// g; PyTorch's Replicate → Shard and Partial → Replicate redistributions):
//   enter_parallel_region   identity forward; backward sums the input's gradient over the group
//                           (each rank's slice of the computation contributed part of it)
//   leave_parallel_region   forward sums the partial results over the group; identity backward
// A colwise linear enters, a rowwise one leaves: one all-reduce each way per pair.
#include <torch/torch.h>

#include "distributed/communicator.h"

namespace volt::tp {

torch::Tensor enter_parallel_region(const torch::Tensor& input, Communicator& group);
torch::Tensor leave_parallel_region(const torch::Tensor& partial, Communicator& group);

}  // namespace volt::tp

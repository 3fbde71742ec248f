#pragma once
// Gradient clipping by norm when each rank holds a different part of the gradients (OSS's shards,
// FSDP's flat shards): each rank computes the p-th power of its part's norm (the max for the
// inf-norm), one all_reduce sums (maxes) them, and every rank scales its gradients by the same
// coefficient. Equal to clipping the unsharded gradients as long as every element is counted on
// exactly one rank.
#include <torch/torch.h>

#include <vector>

#include "distributed/communicator.h"

namespace volt {

// Norms the gradients of `counted` (this rank's part; parameters without a gradient are skipped),
// then scales the gradients of `scaled` by max_norm / (norm + 1e-6) when that is below 1, as
// torch.nn.utils.clip_grad_norm_ does. Returns the total norm before clipping, a 0-dim float64
// tensor that is not read on the host (the clipping happens on the device). Throws
// ConfigurationError for max_norm or norm_type <= 0, naming `owner`. [collective]
torch::Tensor clip_sharded_grad_norm(const std::vector<torch::Tensor>& counted,
                                     const std::vector<torch::Tensor>& scaled, double max_norm, double norm_type,
                                     Communicator& communicator, const std::string& owner);

}  // namespace volt

#pragma once
// Which parameters a backward will not reach. find_unused_parameters needs to know before
// backward ends, so that buckets holding unused parameters are reduced too instead of waiting
// forever for gradients that never come: the autograd graph is walked from the loss, and a
// parameter whose gradient accumulator is not in it receives no gradient this iteration.
#include <torch/torch.h>

#include <memory>
#include <vector>

namespace torch::autograd {
struct Node;
}

namespace volt::ddp {

// The indices i for which `accumulators[i]` (parameter i's gradient accumulator) cannot be reached
// from `loss`'s graph. A loss without a graph reaches nothing.
std::vector<size_t> unreachable_accumulators(const torch::Tensor& loss,
                                             const std::vector<std::shared_ptr<torch::autograd::Node>>& accumulators);

}  // namespace volt::ddp

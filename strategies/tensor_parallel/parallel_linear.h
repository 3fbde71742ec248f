#pragma once
// A torch::nn::Linear split across a group (Note [A module split across a group]):
//   colwise  weight and bias split on dim 0 (output features): y_r = x W_r^T + b_r, x entering the
//            parallel region (its gradient summed over the group); the output is this rank's slice
//            of the last dimension (ColwiseParallel); with `fused` projections in the output (q|k|v),
//            this rank's slice of each, side by side
//   rowwise  weight split on dim 1 (input features), bias whole: y = Σ_r (x_r W_r^T + b / T), the
//            sum leaving the region; PyTorch's arithmetic (RowwiseParallel): each rank adds its
//            share of the bias in its product
#include "strategies/tensor_parallel/split_module.h"

namespace volt::tp {

class ParallelLinear : public SplitModule {
 public:
  // Splits `linear`'s parameters in place for `group` (this rank's slice kept). Throws
  // ConfigurationError, naming `path`, when the split dimension does not divide by the group's size.
  ParallelLinear(torch::nn::LinearImpl& linear, std::string path, ParallelStyle style, Communicator& group,
                 int64_t fused = 1);

  torch::Tensor around(torch::nn::Module& module, const std::vector<torch::Tensor>& tensors,
                       const ModuleForward& forward, bool tensors_complete) override;

 private:
  torch::nn::LinearImpl& linear_;
};

}  // namespace volt::tp

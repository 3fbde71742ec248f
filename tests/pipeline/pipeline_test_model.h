#pragma once
// The model the pipeline tests cut into stages (tests/pipeline/python/pytorch_pipelining_reference.py
// builds the same): a 7-entry MLP, 6 -> 16 -> 16 -> 8 -> 1 with Tanh between, and its loss.
#include <torch/torch.h>

#include <memory>

namespace volt::pipeline::test_model {

inline torch::nn::Sequential mlp() {
  return torch::nn::Sequential(torch::nn::Linear(6, 16), torch::nn::Tanh(), torch::nn::Linear(16, 16),
                               torch::nn::Tanh(), torch::nn::Linear(16, 8), torch::nn::Tanh(), torch::nn::Linear(8, 1));
}

inline torch::Tensor mean_squared_error(const torch::Tensor& output, const torch::Tensor& target) {
  return (output - target).square().mean();
}

// A copy of `model` (built before the ranks start: the global generator is not for threads).
inline torch::nn::Sequential copy_of(const torch::nn::Sequential& model) {
  return std::dynamic_pointer_cast<torch::nn::SequentialImpl>(model->clone());
}

}  // namespace volt::pipeline::test_model

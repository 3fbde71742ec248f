#pragma once
// The FSDP benchmarks' model (fsdp_memory, reshard_memory): a ~20M-parameter MLP of 8 equal
// blocks, Linear 1580x1580 (one fsdp unit each by min_num_params=1e6) with ReLUs between them,
// an MSE loss and Adam. Its Sequential is also its pipeline (pipeline_model.h): the `pipeline`
// strategy cuts it into stages of whole blocks.
#include <torch/torch.h>

#include "strategies/pipeline/pipeline_model.h"
#include "trainer/module.h"

namespace volt::bench {

inline constexpr int64_t kBlockWidth = 1580, kBlocks = 8;  // 8 x (1580 x 1580 + 1580) = 19.98M parameters

class BlockMlp : public Module, public pipeline::PipelineModel {
 public:
  BlockMlp() {
    for (int64_t i = 0; i < kBlocks; ++i) {
      net->push_back(torch::nn::Linear(kBlockWidth, kBlockWidth));
      if (i + 1 < kBlocks) net->push_back(torch::nn::ReLU());
    }
    register_module("net", net);
  }
  torch::Tensor training_step(const Batch& batch, int64_t) override {
    return pipeline_loss(net->forward(batch.input), batch.target);
  }
  torch::nn::Sequential pipeline_layers() override { return net; }
  torch::Tensor pipeline_loss(const torch::Tensor& output, const torch::Tensor& target) override {
    return torch::mse_loss(output, target);
  }
  OptimizerConfig configure_optimizers() override {
    return OptimizerConfig(std::make_shared<torch::optim::Adam>(parameters(), torch::optim::AdamOptions(1e-4)));
  }
  torch::nn::Sequential net;
};

}  // namespace volt::bench

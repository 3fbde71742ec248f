// volt::checkpoint on cuda:0 (Note [Recomputed forwards]): the recompute draws dropout's mask
// from the CUDA generator's saved state and runs under the forward's CUDA autocast, so outputs
// and gradients equal the run without checkpointing bitwise, and the CUDA generator is left
// where that run leaves it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "nn/activation_checkpoint.h"
#include "precision/autocast.h"
#include "tests/cuda/cuda_test_support.h"

namespace volt {
namespace {

struct CheckpointRun {
  torch::Tensor output, next_draw;
  std::vector<torch::Tensor> grads;
};

using CudaBlocks = std::vector<torch::nn::Sequential>;

std::vector<torch::Tensor> cuda_block_parameters(const CudaBlocks& blocks) {
  std::vector<torch::Tensor> out;
  for (const auto& block : blocks) {
    for (const auto& p : block->parameters()) out.push_back(p);
  }
  return out;
}

CheckpointRun run_blocks(CudaBlocks& blocks, const torch::Tensor& x, bool checkpointed) {
  for (auto& p : cuda_block_parameters(blocks)) p.mutable_grad() = torch::Tensor();
  torch::manual_seed(7);  // every generator, CUDA's included
  torch::Tensor h = x;
  {
    auto autocast = autocast_scope(torch::kCUDA, torch::kBFloat16);
    for (auto& block : blocks) h = checkpointed ? checkpoint(block, h) : block->forward(h);
  }
  h.to(torch::kFloat).pow(2).mean().backward();
  CheckpointRun result{h.detach().cpu(), torch::rand({8}, torch::kCUDA).cpu(), {}};
  for (const auto& p : cuda_block_parameters(blocks)) result.grads.push_back(p.grad().cpu());
  return result;
}

TEST(ActivationCheckpointCuda, DropoutAndAutocastRecomputeBitwise) {
  VOLT_REQUIRE_CUDA();
  torch::manual_seed(0);
  CudaBlocks blocks;
  for (int i = 0; i < 3; ++i) {
    blocks.emplace_back(torch::nn::Linear(64, 256), torch::nn::GELU(), torch::nn::Dropout(0.2),
                        torch::nn::Linear(256, 64));
    blocks.back()->to(torch::kCUDA);
  }
  const auto x = torch::randn({32, 64}, torch::kCUDA);
  const auto plain = run_blocks(blocks, x, false);
  const auto checkpointed = run_blocks(blocks, x, true);
  EXPECT_EQ(checkpointed.output.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(plain.output, checkpointed.output));
  ASSERT_EQ(plain.grads.size(), checkpointed.grads.size());
  for (size_t i = 0; i < plain.grads.size(); ++i) {
    EXPECT_TRUE(torch::equal(plain.grads[i], checkpointed.grads[i])) << "parameter " << i;
  }
  EXPECT_TRUE(torch::equal(plain.next_draw, checkpointed.next_draw)) << "the CUDA generator was not put back";
}

}  // namespace
}  // namespace volt

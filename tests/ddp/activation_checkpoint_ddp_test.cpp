// volt::checkpoint under DDP's reducer (Note [Recomputed forwards]): the recomputed blocks'
// gradients reach the parameters through the autograd engine, so the reducer's hooks fire and
// its buckets reduce as without checkpointing. Two thread ranks over Gloo train the same blocks
// with and without checkpointing; every rank's parameters must be bitwise the same after every step.
#include <gtest/gtest.h>

#include "nn/activation_checkpoint.h"
#include "strategies/ddp/reducer.h"
#include "tests/ddp/reducer_harness.h"
#include "tests/distributed/thread_ranks.h"

namespace volt::ddp {
namespace {

using testing::loopback_options;
using testing::run_thread_ranks;

struct CheckpointedBlocks : torch::nn::Module {
  std::vector<torch::nn::Sequential> blocks;
  CheckpointedBlocks() {
    torch::manual_seed(4);
    for (int i = 0; i < 3; ++i) {
      blocks.push_back(register_module("block" + std::to_string(i),
                                       torch::nn::Sequential(torch::nn::Linear(8, 16), torch::nn::Tanh(),
                                                             torch::nn::Linear(16, 8))));
    }
  }
  torch::Tensor forward(torch::Tensor x, bool checkpointed) {
    for (auto& block : blocks) x = checkpointed ? checkpoint(block, x) : block->forward(x);
    return x;
  }
};

// Each rank's parameters, flattened, after each of `steps` SGD steps. Weights and data are drawn
// before the ranks start: the threads share the process's generator.
std::vector<std::vector<torch::Tensor>> train_blocks(bool checkpointed, int steps) {
  const int64_t world = 2;
  std::vector<std::shared_ptr<CheckpointedBlocks>> nets;
  for (int64_t r = 0; r < world; ++r) nets.push_back(std::make_shared<CheckpointedBlocks>());
  torch::manual_seed(100);
  std::vector<std::vector<std::pair<torch::Tensor, torch::Tensor>>> data(world);  // [rank][step]: (x, y)
  for (int step = 0; step < steps; ++step) {
    for (int64_t r = 0; r < world; ++r) data[r].emplace_back(torch::randn({4, 8}), torch::randn({4, 8}));
  }
  std::vector<std::vector<torch::Tensor>> trajectories(world);
  const auto errors = run_thread_ranks(world, [&](int64_t rank, int64_t port) {
    auto comm = Communicator::connect(loopback_options(rank, world, port));
    CheckpointedBlocks& net = *nets[static_cast<size_t>(rank)];
    Reducer reducer(net.parameters(), harness::names_of(net), *comm, harness::tiny_buckets());
    torch::optim::SGD optimizer(net.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    for (int step = 0; step < steps; ++step) {
      const auto& [x, y] = data[static_cast<size_t>(rank)][static_cast<size_t>(step)];
      auto loss = torch::mse_loss(net.forward(x, checkpointed), y);
      reducer.prepare_for_backward(loss);
      loss.backward();
      reducer.finalize_backward();
      optimizer.step();
      optimizer.zero_grad();
      std::vector<torch::Tensor> flat;
      for (const auto& p : net.parameters()) flat.push_back(p.detach().flatten());
      trajectories[static_cast<size_t>(rank)].push_back(torch::cat(flat).clone());
    }
  });
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  return trajectories;
}

TEST(ActivationCheckpointDDP, TrainsBitwiseLikeTheBlocksWithoutIt) {
  const auto plain = train_blocks(false, 3);
  const auto checkpointed = train_blocks(true, 3);
  for (size_t rank = 0; rank < plain.size(); ++rank) {
    ASSERT_EQ(plain[rank].size(), checkpointed[rank].size()) << "rank " << rank;
    for (size_t step = 0; step < plain[rank].size(); ++step) {
      EXPECT_TRUE(torch::equal(plain[rank][step], checkpointed[rank][step]))
          << "rank " << rank << " step " << step << ": max difference "
          << (plain[rank][step] - checkpointed[rank][step]).abs().max().item<double>();
    }
  }
  // The ranks agree, as DDP makes them.
  EXPECT_TRUE(torch::equal(checkpointed[0].back(), checkpointed[1].back()));
}

}  // namespace
}  // namespace volt::ddp

// Sparse gradients: an Embedding(sparse=true) under DDP would fail inside an autograd hook with
// LibTorch's "copy_() between dense and sparse Tensors", so (Note [Sparse gradients]) every distributed
// strategy refuses such modules at setup, and a sparse gradient from a functional op is refused
// at the backward that produces it, naming the parameter. Through the Trainer and volt's launcher
// for every registered distributed strategy; the reducers directly for the functional op.
#include <gtest/gtest.h>

#include "strategies/ddp/reducer.h"
#include "strategies/dense_gradients.h"
#include "strategies/sharded/sharded_reducer.h"
#include "strategies/strategy_registry.h"
#include "tests/distributed/thread_ranks.h"
#include "tests/distributed/worker_runs.h"

namespace volt {
namespace {

std::vector<std::string> distributed_strategies() {
  std::vector<std::string> names;
  for (const auto& registered : strategy_registry().names()) {
    // tensor_parallel needs a plan; the refusal comes before any module is split.
    const std::string name = registered == "tensor_parallel" ? "tensor_parallel:plan=linear:colwise" : registered;
    try {
      if (create_strategy(name, 2, "test")->is_distributed()) names.push_back(name);
    } catch (const ConfigurationError&) {
      // single_device: one process only
    }
  }
  return names;
}

TEST(SparseGradients, EveryDistributedStrategyRefusesASparseEmbeddingAtSetup) {
  const auto strategies = distributed_strategies();
  ASSERT_GE(strategies.size(), 2u) << "ddp and the sharded strategies at least";
  for (const auto& strategy : strategies) {
    testing::TemporaryDirectory dir;
    const auto result = testing::run_command(
        testing::train_command(dir.path(),
                               "--model sparse_embedding --batch-size 8 --devices 2 --strategy " + strategy),
        180);
    EXPECT_NE(result.exit_code, 0) << strategy << ":\n" << result.output;
    EXPECT_TRUE(testing::trained_lines(result.output).empty()) << strategy << " trained anyway:\n" << result.output;
    EXPECT_NE(result.output.find("submodule(s) 'offset' are built with sparse=true"), std::string::npos)
        << strategy << ":\n"
        << result.output;
    EXPECT_NE(result.output.find("build it with sparse=false"), std::string::npos) << strategy << ":\n"
                                                                                   << result.output;
  }
}

// One process is not refused: LibTorch's SGD applies the sparse gradient itself.
TEST(SparseGradients, OneProcessTrainsWithThem) {
  testing::TemporaryDirectory dir;
  const auto result = testing::run_command(
      testing::train_command(dir.path(), "--model sparse_embedding --batch-size 16 --strategy single_device"), 120);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(testing::trained_lines(result.output).size(), 1u) << result.output;
}

// A parameter that a functional op gives a sparse gradient (no module declares it): the loss
// picks rows of `table` through torch::embedding(..., sparse=true).
torch::Tensor sparse_loss(const torch::Tensor& table) {
  return torch::embedding(table, torch::tensor({0, 2}, torch::kLong), -1, false, /*sparse=*/true).sum();
}

TEST(SparseGradients, TheDDPReducerRefusesOneAtTheBackwardThatProducesIt) {
  const auto errors = testing::run_thread_ranks(2, [](int64_t rank, int64_t port) {
    auto comm = Communicator::connect(testing::loopback_options(rank, 2, port));
    auto table = torch::randn({4, 3}).requires_grad_();
    ddp::Reducer reducer({table}, {"table"}, *comm, ddp::ReducerOptions{});
    const auto loss = sparse_loss(table);
    reducer.prepare_for_backward(loss);
    loss.backward();
    reducer.finalize_backward();
  });
  for (const auto& error : errors) {
    EXPECT_NE(error.find("--strategy ddp: parameter 'table' received a sparse gradient"), std::string::npos) << error;
  }
}

TEST(SparseGradients, TheShardedReducerRefusesOneAtTheBackwardThatProducesIt) {
  const auto errors = testing::run_thread_ranks(2, [](int64_t rank, int64_t port) {
    auto comm = Communicator::connect(testing::loopback_options(rank, 2, port));
    auto table = torch::randn({4, 3}).requires_grad_();
    ShardedReducer reducer({table}, {"table"}, {0}, *comm, ShardedReducerOptions{});
    reducer.prepare_for_backward(torch::Tensor());
    sparse_loss(table).backward();
    reducer.finalize_backward();
  });
  for (const auto& error : errors) {
    EXPECT_NE(error.find("--strategy ddp_sharded: parameter 'table' received a sparse gradient"), std::string::npos)
        << error;
  }
}

TEST(SparseGradients, DenseEmbeddingsAndOtherModulesPassTheSetupCheck) {
  torch::nn::Sequential dense(torch::nn::Embedding(4, 3), torch::nn::Linear(3, 1),
                              torch::nn::EmbeddingBag(torch::nn::EmbeddingBagOptions(4, 3)));
  EXPECT_NO_THROW(refuse_sparse_gradient_modules(*dense, "ddp"));
  torch::nn::Sequential sparse(torch::nn::Linear(3, 1),
                               torch::nn::EmbeddingBag(torch::nn::EmbeddingBagOptions(4, 3).sparse(true)));
  try {
    refuse_sparse_gradient_modules(*sparse, "ddp");
    FAIL() << "an EmbeddingBag with sparse=true passed";
  } catch (const NotSupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("submodule(s) '1' are built with sparse=true"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace volt

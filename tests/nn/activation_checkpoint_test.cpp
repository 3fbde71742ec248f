// volt::checkpoint against the same forward without it (Note [Recomputed forwards]): the same
// outputs and gradients, bitwise, with dropout drawing and autocast on; BatchNorm's statistics
// moving once; the random generators left as the run without checkpointing leaves them; and a
// clear error for a function that reads a tensor it was not given.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "core/error.h"
#include "gpt/gpt_model.h"
#include "nn/activation_checkpoint.h"
#include "precision/autocast.h"
#include "tests/support/test_support.h"

namespace volt {
namespace {

// A transformer-ish block: the parts whose recompute could differ (dropout's draws, a
// normalization, a nonlinearity) and a second input, as a block taking (x, mask) has.
class BlockImpl : public torch::nn::Module {
 public:
  explicit BlockImpl(int64_t width)
      : up_(register_module("up", torch::nn::Linear(width, 2 * width))),
        down_(register_module("down", torch::nn::Linear(2 * width, width))),
        norm_(register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})))),
        dropout_(register_module("dropout", torch::nn::Dropout(0.3))) {}

  torch::Tensor forward(const torch::Tensor& x) {
    return x + dropout_(down_(torch::gelu(up_(norm_(x)))));
  }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask) { return forward(x) * mask; }

 private:
  torch::nn::Linear up_, down_;
  torch::nn::LayerNorm norm_;
  torch::nn::Dropout dropout_;
};
TORCH_MODULE(Block);

struct Net {
  std::vector<Block> blocks;
  explicit Net(int64_t depth, int64_t width) {
    torch::manual_seed(3);
    for (int64_t i = 0; i < depth; ++i) blocks.emplace_back(width);
  }
  std::vector<torch::Tensor> parameters() const {
    std::vector<torch::Tensor> out;
    for (const auto& b : blocks) {
      for (const auto& p : b->parameters()) out.push_back(p);
    }
    return out;
  }
  void zero_grad() {
    for (auto& p : parameters()) p.mutable_grad() = torch::Tensor();
  }
};

struct Outcome {
  torch::Tensor output;
  std::vector<torch::Tensor> grads;
  torch::Tensor next_draw;  // what the generator gives after the backward
};

Outcome run(Net& net, const torch::Tensor& x, bool checkpointed, const torch::Tensor& mask = {}, uint64_t seed = 11) {
  net.zero_grad();
  torch::manual_seed(seed);
  torch::Tensor h = x;
  for (auto& block : net.blocks) {
    if (checkpointed) {
      h = mask.defined() ? checkpoint(block, h, mask) : checkpoint(block, h);
    } else {
      h = mask.defined() ? block->forward(h, mask) : block->forward(h);
    }
  }
  h.pow(2).mean().backward();
  Outcome outcome{h.detach(), {}, torch::rand({4})};
  for (const auto& p : net.parameters()) outcome.grads.push_back(p.grad().defined() ? p.grad().clone() : p.grad());
  return outcome;
}

void expect_same(const Outcome& a, const Outcome& b) {
  EXPECT_TRUE(torch::equal(a.output, b.output));
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) {
    EXPECT_TRUE(torch::equal(a.grads[i], b.grads[i])) << "parameter " << i << ": max difference "
                                                      << (a.grads[i] - b.grads[i]).abs().max().item<double>();
  }
  EXPECT_TRUE(torch::equal(a.next_draw, b.next_draw)) << "the generator is not where the plain run leaves it";
}

TEST(ActivationCheckpoint, GradientsEqualTheRunWithoutItWithDropoutOn) {
  Net net(3, 16);
  // The first block's input needs no gradient: the parameters get theirs through the node anyway.
  const auto x = torch::randn({8, 16});
  const auto plain = run(net, x, false);
  const auto checkpointed = run(net, x, true);
  expect_same(plain, checkpointed);
  // Dropout really draws (another seed, another output): without the saved generator state the
  // recompute would differ.
  EXPECT_FALSE(torch::equal(plain.output, run(net, x, false, {}, 12).output));
}

// What preserve_rng_state buys: without it the recompute draws another mask, and the gradient
// no longer belongs to the forward's output.
TEST(ActivationCheckpoint, WithoutTheSavedRandomStateTheRecomputeDrawsAnotherMask) {
  const auto x = torch::ones({64}).requires_grad_(true);
  auto drop = [](const std::vector<torch::Tensor>& in) {
    return std::vector{torch::dropout(in[0], 0.5, /*train=*/true)};
  };
  torch::Tensor grads[2];
  for (bool preserve : {false, true}) {
    torch::manual_seed(3);
    const auto y = checkpoint(drop, {x}, {}, {}, CheckpointOptions{.preserve_rng_state = preserve})[0];
    grads[preserve] = torch::autograd::grad({y.sum()}, {x})[0];
    // The gradient of a dropout is its mask (scaled): nonzero exactly where the output kept x.
    EXPECT_EQ(torch::equal(grads[preserve] != 0, y != 0), preserve) << "preserve_rng_state " << preserve;
  }
}

TEST(ActivationCheckpoint, ABlockOfSeveralInputs) {
  Net net(2, 8);
  const auto x = torch::randn({4, 8});
  const auto mask = (torch::rand({4, 8}) > 0.2).to(torch::kFloat);
  expect_same(run(net, x, false, mask), run(net, x, true, mask));
}

TEST(ActivationCheckpoint, InputGradientsAndAutogradGrad) {
  Net net(2, 8);
  const auto x = torch::randn({4, 8}).requires_grad_(true);
  torch::Tensor grads[2];
  for (bool checkpointed : {false, true}) {
    torch::manual_seed(5);
    torch::Tensor h = x;
    for (auto& block : net.blocks) h = checkpointed ? checkpoint(block, h) : block->forward(h);
    grads[checkpointed] = torch::autograd::grad({h.sum()}, {x})[0];
  }
  EXPECT_TRUE(torch::equal(grads[0], grads[1]));
}

TEST(ActivationCheckpoint, FrozenParametersGetNoGradient) {
  Net net(2, 8);
  for (auto& p : net.blocks[0]->parameters()) p.requires_grad_(false);
  const auto x = torch::randn({4, 8});
  const auto plain = run(net, x, false);
  const auto checkpointed = run(net, x, true);
  EXPECT_TRUE(torch::equal(plain.output, checkpointed.output));
  for (const auto& p : net.blocks[0]->parameters()) EXPECT_FALSE(p.grad().defined());
  for (const auto& p : net.blocks[1]->parameters()) EXPECT_TRUE(p.grad().defined());
}

TEST(ActivationCheckpoint, BatchNormStatisticsMoveOncePerStep) {
  torch::manual_seed(1);
  torch::nn::Sequential body(torch::nn::Linear(6, 6), torch::nn::BatchNorm1d(6), torch::nn::ReLU());
  const auto x = torch::randn({10, 6});
  auto stats = [&](bool checkpointed) {
    auto copy = std::dynamic_pointer_cast<torch::nn::SequentialImpl>(body->clone());
    torch::nn::Sequential model(copy);
    const auto y = checkpointed ? checkpoint(model, x) : model->forward(x);
    y.sum().backward();
    return std::make_pair(model[1]->as<torch::nn::BatchNorm1d>()->running_mean.clone(),
                          model[0]->as<torch::nn::Linear>()->weight.grad().clone());
  };
  const auto [plain_mean, plain_grad] = stats(false);
  const auto [mean, grad] = stats(true);
  EXPECT_TRUE(torch::equal(plain_mean, mean)) << "the recompute moved the running mean a second time";
  EXPECT_TRUE(torch::equal(plain_grad, grad));
}

TEST(ActivationCheckpoint, TheRecomputeRunsUnderTheForwardsAutocast) {
  Net net(2, 16);
  const auto x = torch::randn({8, 16});
  Outcome outcomes[2];
  for (bool checkpointed : {false, true}) {
    net.zero_grad();
    torch::manual_seed(2);
    torch::Tensor h = x;
    {
      auto autocast = autocast_scope(torch::kCPU, torch::kBFloat16);
      for (auto& block : net.blocks) h = checkpointed ? checkpoint(block, h) : block->forward(h);
    }
    h.to(torch::kFloat).pow(2).mean().backward();  // outside the autocast scope, as a training step's backward is
    outcomes[checkpointed] = {h.detach(), {}, torch::rand({4})};
    for (const auto& p : net.parameters()) outcomes[checkpointed].grads.push_back(p.grad().clone());
  }
  expect_same(outcomes[0], outcomes[1]);
  // Autocast changed what was computed: without it in the recompute, the gradients would differ.
  EXPECT_FALSE(torch::equal(outcomes[0].grads[0], run(net, x, false, {}, 2).grads[0]));
}

// Manual optimization runs the backward inside the step's autocast scope. The checkpointed forward's
// casts have no gradient history, so they must not be cached for the recompute to reuse.
TEST(ActivationCheckpoint, ABackwardInsideTheAutocastScopeStillReachesTheWeights) {
  Net net(2, 16);
  const auto x = torch::randn({8, 16});
  std::vector<torch::Tensor> grads[2];
  for (bool checkpointed : {false, true}) {
    net.zero_grad();
    torch::manual_seed(2);
    auto autocast = autocast_scope(torch::kCPU, torch::kBFloat16);
    torch::Tensor h = x;
    for (auto& block : net.blocks) h = checkpointed ? checkpoint(block, h) : block->forward(h);
    h.to(torch::kFloat).pow(2).mean().backward();
    for (const auto& p : net.parameters()) grads[checkpointed].push_back(p.grad());
  }
  for (size_t i = 0; i < grads[0].size(); ++i) {
    ASSERT_TRUE(grads[1][i].defined()) << "parameter " << i << " got no gradient";
    EXPECT_TRUE(torch::equal(grads[0][i], grads[1][i])) << "parameter " << i;
  }
}

// A module used twice lists its parameters twice; each still gets its gradient once.
TEST(ActivationCheckpoint, ASharedModuleGetsItsGradientOnce) {
  torch::manual_seed(0);
  torch::nn::Linear shared(4, 4);
  const auto x = torch::randn({3, 4});
  auto twice = [&shared](const std::vector<torch::Tensor>& in) { return std::vector{shared(torch::tanh(shared(in[0])))}; };
  twice({x})[0].sum().backward();
  const auto expected = shared->weight.grad().clone();
  shared->weight.mutable_grad() = torch::Tensor();
  auto parameters = shared->parameters();
  const auto again = shared->parameters();
  parameters.insert(parameters.end(), again.begin(), again.end());
  checkpoint(twice, {x}, parameters)[0].sum().backward();
  EXPECT_TRUE(torch::equal(shared->weight.grad(), expected));
}

TEST(ActivationCheckpoint, UnderNoGradItKeepsNothingAndComputesTheSame) {
  Net net(1, 8);
  net.blocks[0]->eval();
  const auto x = torch::randn({4, 8});
  torch::NoGradGuard no_grad;
  const auto y = checkpoint(net.blocks[0], x);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_TRUE(torch::equal(y, net.blocks[0]->forward(x)));
}

TEST(ActivationCheckpoint, ATensorTheFunctionReadsButWasNotGivenIsAnError) {
  auto weight = torch::randn({4, 4}).requires_grad_(true);
  const auto x = torch::randn({2, 4}).requires_grad_(true);
  auto reads_weight = [&weight](const std::vector<torch::Tensor>& in) { return std::vector{in[0].mm(weight)}; };
  const auto y = checkpoint(reads_weight, {x}, {})[0];
  const auto message = testing::configuration_error_of([&] { y.sum().backward(); });
  EXPECT_NE(message.find("neither one of its inputs nor one of its parameters"), std::string::npos) << message;
  // A view of a parameter made outside the function: its graph is the caller's, not the recompute's.
  auto transposed = weight.t();
  auto reads_view = [&transposed](const std::vector<torch::Tensor>& in) { return std::vector{in[0].mm(transposed)}; };
  const auto v = checkpoint(reads_view, {x}, {weight})[0];
  const auto outside = testing::configuration_error_of([&] { v.sum().backward(); });
  EXPECT_NE(outside.find("computed outside it"), std::string::npos) << outside;
  // Given as a parameter, it gets its gradient.
  const auto z = checkpoint(reads_weight, {x}, {weight})[0];
  z.sum().backward();
  EXPECT_TRUE(torch::allclose(weight.grad(), x.t().mm(torch::ones({2, 4}))));
}

// The GPT example's --activation-checkpointing: a checkpoint per decoder block.
TEST(ActivationCheckpoint, TheGPTExamplesBlocks) {
  auto config = gpt::GPTConfig::preset("cpu");
  config.n_layer = 2;
  config.dropout = 0.1;
  const auto tokens = torch::randint(config.vocab_size, {2, 33}, torch::kLong);
  std::vector<torch::Tensor> grads[2];
  torch::Tensor losses[2];
  for (bool checkpointed : {false, true}) {
    config.activation_checkpointing = checkpointed;
    torch::manual_seed(0);
    gpt::GPT model(config);
    torch::manual_seed(1);
    const auto logits = model->forward(tokens.narrow(1, 0, 32));
    losses[checkpointed] = torch::nn::functional::cross_entropy(logits.view({-1, config.vocab_size}),
                                                                tokens.narrow(1, 1, 32).reshape(-1));
    losses[checkpointed].backward();
    for (const auto& p : model->parameters()) grads[checkpointed].push_back(p.grad());
  }
  EXPECT_TRUE(torch::equal(losses[0], losses[1]));
  ASSERT_EQ(grads[0].size(), grads[1].size());
  for (size_t i = 0; i < grads[0].size(); ++i) EXPECT_TRUE(torch::equal(grads[0][i], grads[1][i])) << "parameter " << i;
}

TEST(ActivationCheckpoint, BadArgumentsAreClearErrors) {
  const auto message = testing::configuration_error_of([] { checkpoint(CheckpointedFunction{}, {}, {}); });
  EXPECT_NE(message.find("no function given"), std::string::npos) << message;
  const auto undefined = testing::configuration_error_of([] {
    checkpoint([](const std::vector<torch::Tensor>& in) { return in; }, {torch::Tensor()}, {});
  });
  EXPECT_NE(undefined.find("input 0 is an undefined tensor"), std::string::npos) << undefined;
}

}  // namespace
}  // namespace volt

// volt::call and the forward wrappers (Note [Calling a module through volt]), the module selection
// a policy names, and activation checkpointing by policy (nn/activation_checkpointing_policy.h):
// a call with no wrapper is the plain forward; wrappers see the call's tensors (and learn when an
// argument of another type may hold one they cannot see), nest by depth
// whatever their registration order, and may run the forward again in the backward with other
// tensors (the call's other arguments were copied); a Sequential's entry is routed and put back;
// a forward that returns no Tensor is refused once wrapped; selection by type and by predicate,
// with the error that lists the model's types; the policy's gradients equal the plain run's with
// dropout on, and a model that never reaches the policy is told how to.
#include <gtest/gtest.h>

#include <optional>

#include <torch/torch.h>

#include "core/error.h"
#include "nn/activation_checkpointing_policy.h"
#include "nn/module_call.h"
#include "nn/module_selection.h"
#include "tests/support/test_support.h"

namespace volt {
namespace {

// A forward of two tensors and a number, with dropout: what a transformer block's call looks like.
class ScaledBlockImpl : public torch::nn::Module {
 public:
  explicit ScaledBlockImpl(int64_t width)
      : fc(register_module("fc", torch::nn::Linear(width, width))),
        dropout(register_module("dropout", torch::nn::Dropout(0.4))) {}
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask, double scale) {
    ++forwards;
    return x + scale * mask * dropout(torch::tanh(fc(x)));
  }
  torch::nn::Linear fc;
  torch::nn::Dropout dropout;
  int64_t forwards = 0;  // runs of the forward, recomputes included
};
TORCH_MODULE(ScaledBlock);

class PairImpl : public torch::nn::Module {  // a forward that returns no single Tensor
 public:
  std::pair<torch::Tensor, torch::Tensor> forward(const torch::Tensor& x) { return {x, x}; }
};
TORCH_MODULE(Pair);

struct Model : torch::nn::Module {
  Model() {
    blocks = register_module("blocks", torch::nn::ModuleList(ScaledBlock(4), ScaledBlock(4)));
    head = register_module("head", torch::nn::Sequential(torch::nn::Linear(4, 4), torch::nn::Tanh()));
  }
  torch::Tensor forward(torch::Tensor x, const torch::Tensor& mask) {
    for (const auto& block : *blocks) x = volt::call(block->as<ScaledBlock>(), x, mask, 0.5);
    return head->forward(x);
  }
  torch::nn::ModuleList blocks{nullptr};
  torch::nn::Sequential head{nullptr};
};

// Records what it saw, and in which order wrappers ran.
class Recording : public ForwardWrapper {
 public:
  Recording(int depth, std::vector<std::string>& log, std::string name)
      : depth_(depth), log_(log), name_(std::move(name)) {}
  int depth() const override { return depth_; }
  torch::Tensor around(torch::nn::Module&, const std::vector<torch::Tensor>& tensors,
                       const ModuleForward& forward, bool tensors_complete) override {
    log_.push_back(name_ + ":" + std::to_string(tensors.size()) + (tensors_complete ? "" : "+"));
    kept = forward;
    return forward(tensors);
  }
  ModuleForward kept;

 private:
  int depth_;
  std::vector<std::string>& log_;
  std::string name_;
};

TEST(ModuleCall, WithoutWrappersItIsTheForwardAndWrappersNestByDepth) {
  torch::manual_seed(0);
  ScaledBlock block(4);
  block->eval();  // no dropout: comparable calls
  const auto x = torch::randn({3, 4}), mask = torch::ones({3, 4});
  const auto plain = block->forward(x, mask, 0.5);
  EXPECT_TRUE(torch::equal(volt::call(block, x, mask, 0.5), plain));
  EXPECT_FALSE(has_forward_wrappers(*block));

  std::vector<std::string> log;
  auto inner = std::make_shared<Recording>(kCheckpointingDepth, log, "inner");
  auto outer = std::make_shared<Recording>(kUnitDepth, log, "outer");
  add_forward_wrapper(*block, inner);  // registered first, still inside
  add_forward_wrapper(*block, outer);
  EXPECT_TRUE(torch::equal(volt::call(block, x, mask, 0.5), plain));
  EXPECT_EQ(log, (std::vector<std::string>{"outer:2", "inner:2"})) << "the two tensors, not the scale";

  // The forward a wrapper keeps runs later with other tensors, the scale copied from the call.
  const auto doubled = inner->kept({x * 2, mask});
  EXPECT_TRUE(torch::allclose(doubled, block->forward(x * 2, mask, 0.5)));

  remove_forward_wrapper(*block, *inner);
  remove_forward_wrapper(*block, *outer);
  EXPECT_FALSE(has_forward_wrappers(*block));
}

// x + bias, the bias optional: a tensor argument the call cannot see into.
class OptionalBiasImpl : public torch::nn::Module {
 public:
  torch::Tensor forward(const torch::Tensor& x, const std::optional<torch::Tensor>& bias) {
    return bias ? x + *bias : x;
  }
};
TORCH_MODULE(OptionalBias);

TEST(ModuleCall, AnArgumentThatMayHoldATensorMakesTheCallsTensorsIncomplete) {
  OptionalBias block;
  std::vector<std::string> log;
  auto recording = std::make_shared<Recording>(kUnitDepth, log, "block");
  add_forward_wrapper(*block, recording);
  const auto x = torch::ones({2}), bias = torch::full({2}, 2.0);
  EXPECT_TRUE(torch::equal(volt::call(block, x, std::optional<torch::Tensor>(bias)), x + bias));
  EXPECT_EQ(log, (std::vector<std::string>{"block:1+"})) << "x seen; the optional's tensor not";
  remove_forward_wrapper(*block, *recording);
}

TEST(ModuleCall, ASequentialsEntryIsRoutedThroughItsModulesWrappersAndPutBack) {
  torch::nn::Sequential net(torch::nn::Linear(4, 4), torch::nn::Tanh());
  auto& linear = *net->ptr(0);
  std::vector<std::string> log;
  auto recording = std::make_shared<Recording>(kUnitDepth, log, "linear");
  add_forward_wrapper(linear, recording);
  const auto x = torch::randn({2, 4});
  const auto before = net->forward(x);
  EXPECT_TRUE(log.empty()) << "a Sequential calls its entries directly until one is routed";

  auto routed = route_sequential_entry(*net, 0, linear);
  ASSERT_TRUE(routed.has_value());
  EXPECT_FALSE(route_sequential_entry(*net, 0, linear).has_value()) << "routed once";
  EXPECT_TRUE(torch::equal(net->forward(x), before));
  EXPECT_EQ(log, (std::vector<std::string>{"linear:1"}));
  EXPECT_EQ(net->named_parameters().size(), 2u) << "the registered modules are unchanged";

  restore_sequential_entry(*routed);
  remove_forward_wrapper(linear, *recording);
  net->forward(x);
  EXPECT_EQ(log.size(), 1u);
}

TEST(ModuleCall, AWrappedForwardThatReturnsNoTensorIsRefusedNamingTheModule) {
  Pair pair;
  const auto x = torch::ones({2});
  EXPECT_NO_THROW(volt::call(pair, x)) << "unwrapped: any forward";
  std::vector<std::string> log;
  auto recording = std::make_shared<Recording>(kUnitDepth, log, "pair");
  add_forward_wrapper(*pair, recording);
  const auto message = testing::configuration_error_of([&] { volt::call(pair, x); });
  remove_forward_wrapper(*pair, *recording);
  EXPECT_NE(message.find("a policy wraps this volt::(anonymous namespace)::Pair"), std::string::npos) << message;
  EXPECT_NE(message.find("only a forward that returns one torch::Tensor can be wrapped"), std::string::npos)
      << message;
}

TEST(ModuleSelection, ByTypeOrPredicateOutermostFirstAndAnErrorListingTheTypes) {
  Model model;
  const auto blocks = ModuleSelector::by_type("ScaledBlock").select(model, "test");
  ASSERT_EQ(blocks.size(), 2u);
  EXPECT_EQ(blocks[0].path, "blocks.0");
  EXPECT_EQ(blocks[1].path, "blocks.1");
  EXPECT_EQ(blocks[0].sequential, nullptr) << "a ModuleList holds it, not a Sequential";

  // Linear names torch::nn::Linear; the blocks' own Linear is not searched below a selected block.
  const auto linears = ModuleSelector::by_type("ScaledBlock|torch::nn::Linear").select(model, "test");
  ASSERT_EQ(linears.size(), 3u);
  EXPECT_EQ(linears[2].path, "head.0");
  EXPECT_EQ(linears[2].sequential, model.head.get());
  EXPECT_EQ(linears[2].index, 0u);
  EXPECT_EQ(ModuleSelector::by_type("Linear").select(model, "test").size(), 3u) << "inside the blocks too";

  const auto named = ModuleSelector::by_predicate([](const std::string& path, const torch::nn::Module&) {
                       return path == "blocks.1";
                     }, "the second block").select(model, "test");
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].path, "blocks.1");

  const auto none = testing::configuration_error_of([&] { ModuleSelector::by_type("Block").select(model, "opt=Block"); });
  EXPECT_NE(none.find("opt=Block selects the modules of type Block, and the model has none"), std::string::npos)
      << none;
  EXPECT_NE(none.find("volt::(anonymous namespace)::ScaledBlock"), std::string::npos) << none;
  EXPECT_NE(testing::configuration_error_of([] { ModuleSelector::by_type("A||B"); }).find("joined by '|'"),
            std::string::npos);
  EXPECT_FALSE(valid_module_types("A|"));
  EXPECT_TRUE(valid_module_types("A|torch::nn::Linear"));
}

// Gradients of the model's parameters for one forward and backward, from `seed`.
std::vector<torch::Tensor> gradients(Model& model, uint64_t seed) {
  model.zero_grad();
  torch::manual_seed(seed);
  const auto x = torch::randn({5, 4}), mask = (torch::rand({5, 4}) > 0.3).to(torch::kFloat);
  model.forward(x, mask).square().sum().backward();
  std::vector<torch::Tensor> out;
  for (const auto& p : model.parameters()) out.push_back(p.grad().clone());
  return out;
}

TEST(CheckpointingPolicy, GradientsEqualThePlainRunsWithDropoutAndTheModelIsLeftAsItWas) {
  torch::manual_seed(1);
  Model model;
  const auto plain = gradients(model, 7);
  {
    CheckpointedModules policy(model, ModuleSelector::by_type("ScaledBlock|Linear"), "test");
    EXPECT_EQ(policy.modules().size(), 3u);
    auto* first = model.blocks[0]->as<ScaledBlock>();
    const int64_t before = first->forwards;
    const auto checkpointed = gradients(model, 7);
    EXPECT_EQ(first->forwards - before, 2) << "the forward and its recompute in the backward";
    EXPECT_EQ(policy.calls(), 3) << "two blocks through volt::call, the head's Linear through its entry";
    {
      torch::manual_seed(7);
      const auto x = torch::randn({5, 4}).requires_grad_(), mask = torch::ones({5, 4});
      const auto out = volt::call(model.blocks[0]->as<ScaledBlock>(), x, mask, 0.5);
      EXPECT_NE(out.grad_fn()->name().find("CheckpointFunction"), std::string::npos) << out.grad_fn()->name();
    }
    ASSERT_EQ(checkpointed.size(), plain.size());
    for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(torch::equal(checkpointed[i], plain[i])) << i;
    EXPECT_NE(model.head->ptr(0).get(), model.head->children().front().get()) << "the entry routed";
    EXPECT_NO_THROW(policy.check_reached("test"));
  }
  EXPECT_FALSE(has_forward_wrappers(*model.blocks[0]));
  EXPECT_EQ(model.head->ptr(0).get(), model.head->children().front().get()) << "the entry put back";
  auto* first = model.blocks[0]->as<ScaledBlock>();
  const int64_t before = first->forwards;
  const auto after = gradients(model, 7);
  EXPECT_EQ(first->forwards - before, 1) << "no recompute once the policy is gone";
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(torch::equal(after[i], plain[i])) << i;
}

TEST(CheckpointingPolicy, AModelThatCallsTheModulesDirectlyIsToldHow) {
  Model model;
  CheckpointedModules policy(model, ModuleSelector::by_type("ScaledBlock"), "--strategy ddp:activation_checkpointing");
  const auto x = torch::randn({2, 4});
  model.blocks[0]->as<ScaledBlock>()->forward(x, torch::ones({2, 4}), 1.0).sum().backward();
  {
    torch::NoGradGuard evaluation;  // a call under no_grad checkpoints nothing and does not count
    volt::call(model.blocks[0]->as<ScaledBlock>(), x, torch::ones({2, 4}), 1.0);
  }
  EXPECT_EQ(policy.calls(), 0);
  const auto message = testing::configuration_error_of([&] { policy.check_reached("opt"); });
  EXPECT_NE(message.find("opt selected 2 module(s) ('blocks.0', a volt::(anonymous namespace)::ScaledBlock, first)"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("Call them as volt::call(blocks.0, args...)"), std::string::npos) << message;
}

}  // namespace
}  // namespace volt

// Optimizer state: saved through a checkpoint file and restored into a fresh optimizer, it must
// continue exactly as the original (bitwise), for every optimizer LibTorch ships, and restore the
// group options (lr, betas, ...) the checkpoint holds rather than the new optimizer's own.
#include <gtest/gtest.h>

#include "tests/support/test_support.h"
#include "checkpoint/checkpoint_io.h"
#include "checkpoint/optimizer_state.h"
#include "core/error.h"

namespace volt::testing {
namespace {

using Factory = std::function<std::shared_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>, bool variant)>;

std::vector<torch::Tensor> make_parameters() {
  torch::manual_seed(3);
  return {torch::randn({4, 3}).requires_grad_(), torch::randn({4}).requires_grad_()};
}

void step(torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& params, int64_t i) {
  auto closure = [&] {
    optimizer.zero_grad();
    const auto x = torch::arange(3, torch::kFloat).add(static_cast<double>(i)).sin();
    const auto loss = (params[0].matmul(x) + params[1]).pow(2).sum();
    loss.backward();
    return loss;
  };
  optimizer.step(closure);
}

torch::Tensor flat(const std::vector<torch::Tensor>& params) {
  return torch::cat({params[0].detach().flatten(), params[1].detach().flatten()});
}

struct Case {
  std::string name;
  Factory make;  // variant: other hyperparameters, which the checkpoint's must replace
};

class OptimizerState : public ::testing::TestWithParam<Case> {};

TEST_P(OptimizerState, ARestoredOptimizerContinuesBitwiseLikeTheOriginal) {
  namespace o = torch::optim;
  auto params = make_parameters();
  auto original = GetParam().make(params, false);
  for (int64_t i = 0; i < 3; ++i) step(*original, params, i);

  TemporaryDirectory dir;
  CheckpointIO io;
  StateDict checkpoint;
  checkpoint.set("optimizer", optimizer_state_dict(*original));
  io.save(checkpoint, dir.file("optimizer.ckpt"));
  const StateDict loaded = io.load(dir.file("optimizer.ckpt")).child("optimizer");

  std::vector<torch::Tensor> copies;
  for (const auto& p : params) copies.push_back(p.detach().clone().requires_grad_());
  auto restored = GetParam().make(copies, true);
  load_optimizer_state_dict(*restored, loaded, "optimizer 0");
  for (int64_t i = 3; i < 6; ++i) {
    step(*original, params, i);
    step(*restored, copies, i);
  }
  EXPECT_TRUE(torch::equal(flat(params), flat(copies)))
      << "max difference " << (flat(params) - flat(copies)).abs().max().item<double>();
}

INSTANTIATE_TEST_SUITE_P(
    EveryLibTorchOptimizer, OptimizerState,
    ::testing::Values(
        Case{"SGD",
             [](std::vector<torch::Tensor> p, bool v) {
               return std::make_shared<torch::optim::SGD>(
                   p, torch::optim::SGDOptions(v ? 0.5 : 0.01).momentum(v ? 0.1 : 0.9).nesterov(!v).weight_decay(v ? 0 : 1e-3));
             }},
        Case{"Adam",
             [](std::vector<torch::Tensor> p, bool v) {
               return std::make_shared<torch::optim::Adam>(
                   p, torch::optim::AdamOptions(v ? 0.5 : 0.01).betas({v ? 0.5 : 0.8, 0.99}).amsgrad(!v));
             }},
        Case{"AdamW",
             [](std::vector<torch::Tensor> p, bool v) {
               return std::make_shared<torch::optim::AdamW>(p, torch::optim::AdamWOptions(v ? 0.5 : 0.01).weight_decay(v ? 0 : 0.1));
             }},
        Case{"RMSprop",
             [](std::vector<torch::Tensor> p, bool v) {
               return std::make_shared<torch::optim::RMSprop>(
                   p, torch::optim::RMSpropOptions(v ? 0.5 : 0.01).momentum(v ? 0 : 0.5).centered(!v));
             }},
        Case{"Adagrad",
             [](std::vector<torch::Tensor> p, bool v) {
               return std::make_shared<torch::optim::Adagrad>(p, torch::optim::AdagradOptions(v ? 0.5 : 0.1).lr_decay(v ? 0 : 0.01));
             }},
        // Not in PyTorch's layout: stored as LibTorch's own archive. A smaller history_size in the
        // new optimizer: the saved one must win, or the restored history is indexed past its end.
        Case{"LBFGS",
             [](std::vector<torch::Tensor> p, bool v) {
               return std::make_shared<torch::optim::LBFGS>(p, torch::optim::LBFGSOptions(v ? 0.5 : 0.1).history_size(v ? 2 : 5));
             }}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

TEST(OptimizerStateErrors, AnotherOptimizerTypeIsRefused) {
  auto params = make_parameters();
  torch::optim::Adam adam(params, 0.01);
  step(adam, params, 0);
  torch::optim::SGD sgd(params, 0.01);
  try {
    load_optimizer_state_dict(sgd, optimizer_state_dict(adam), "optimizer 0");
    FAIL() << "expected CheckpointError";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("holds Adam state but this run's optimizer is SGD"), std::string::npos) << e.what();
  }
}

TEST(OptimizerStateErrors, OtherParameterGroupsAreRefused) {
  auto params = make_parameters();
  torch::optim::Adam adam(params, 0.01);
  step(adam, params, 0);
  torch::optim::Adam fewer(std::vector<torch::Tensor>{params[0]}, 0.01);
  try {
    load_optimizer_state_dict(fewer, optimizer_state_dict(adam), "optimizer 0");
    FAIL() << "expected CheckpointError";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("param groups of sizes [2] but this optimizer has [1]"), std::string::npos)
        << e.what();
  }
}

TEST(OptimizerStateErrors, AMisShapedStateNamesTheParameter) {
  auto params = make_parameters();
  torch::optim::Adam adam(params, 0.01);
  step(adam, params, 0);
  std::vector<torch::Tensor> other{torch::zeros({4, 5}, torch::requires_grad()), torch::zeros({4}, torch::requires_grad())};
  torch::optim::Adam target(other, 0.01);
  try {
    load_optimizer_state_dict(target, optimizer_state_dict(adam), "optimizer 0",
                              [&](const torch::Tensor& p) { return p.dim() == 2 ? std::string("fc.weight") : "fc.bias"; });
    FAIL() << "expected CheckpointError";
  } catch (const CheckpointError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("parameter 0 (fc.weight)"), std::string::npos) << message;
    EXPECT_NE(message.find("[4, 3]"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace volt::testing

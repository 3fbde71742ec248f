// volt::OSS against PyTorch's own ZeroRedundancyOptimizer (tests/sharded/python/zero_reference.py,
// run by testing::reference_python: 1.13 or 2.11, the version of this build's LibTorch): the same
// MLP, initial weights, data and DDP-averaged gradients on 2 and 3 ranks; after every step the
// parameters must be bitwise equal (Adam against PyTorch 2.x: within 1e-6, see the test). Rank 0's parameters are compared (OSS's broadcast leaves
// every rank the same; oss_test checks that).
#include <gtest/gtest.h>

#include <regex>
#include <sstream>

#include "distributed/network.h"
#include "strategies/sharded/oss.h"
#include "tests/distributed/thread_ranks.h"
#include "tests/support/test_support.h"

namespace volt {
namespace {

using testing::with_communicators;

constexpr int64_t kZeroParitySteps = 5;

std::vector<torch::Tensor> zero_parity_params() {
  auto generator = at::detail::createCPUGenerator(7);
  std::vector<torch::Tensor> params;
  for (const auto& shape : std::vector<std::vector<int64_t>>{{32, 16}, {32}, {16, 32}, {16}, {4, 16}, {4}}) {
    params.push_back((torch::randn(shape, generator) * 0.3).requires_grad_(true));
  }
  return params;
}

torch::Tensor zero_parity_loss(const std::vector<torch::Tensor>& p, int64_t step, int64_t rank) {
  auto generator = at::detail::createCPUGenerator(static_cast<uint64_t>(1000 + 10 * step + rank));
  const auto x = torch::randn({8, 16}, generator);
  const auto y = torch::randn({8, 4}, generator);
  auto h = torch::tanh(torch::nn::functional::linear(x, p[0], p[1]));
  h = torch::tanh(torch::nn::functional::linear(h, p[2], p[3]));
  return (torch::nn::functional::linear(h, p[4], p[5]) - y).pow(2).mean();
}

// The reference's DDP average: every rank's gradient, summed in rank order, over the world size.
void average_like_the_reference(std::vector<torch::Tensor>& params, Communicator& comm) {
  for (auto& p : params) {
    const auto gathered = comm.all_gather(p.grad());
    auto total = gathered[0].clone();
    for (int64_t r = 1; r < comm.size(); ++r) total += gathered[r];
    p.mutable_grad().copy_(total / comm.size());
  }
}

// Python's STEP lines: parameters after each step.
std::vector<std::vector<double>> pytorch_zero_steps(int64_t world, const std::string& optimizer) {
  const std::string script = std::string(VOLT_SOURCE_DIR) + "/tests/sharded/python/zero_reference.py";
  const auto result = testing::run_command(testing::reference_python() + " " + script + " --world " + std::to_string(world) +
                                               " --optimizer " + optimizer + " --steps " +
                                               std::to_string(kZeroParitySteps) + " --port " +
                                               std::to_string(find_free_port()) + " 2>&1",
                                           180);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  std::vector<std::vector<double>> steps;
  static const std::regex pattern("STEP step=(\\d+) params=(\\S+)");
  for (std::sregex_iterator it(result.output.begin(), result.output.end(), pattern), end; it != end; ++it) {
    std::stringstream values((*it)[2]);
    std::vector<double> params;
    for (std::string value; std::getline(values, value, ',');) params.push_back(std::stod(value));
    steps.push_back(params);
  }
  return steps;
}

class ZeroParity : public ::testing::TestWithParam<std::tuple<int64_t, std::string>> {};

TEST_P(ZeroParity, OSSStepsBitwiseLikePyTorchsZeroRedundancyOptimizer) {
  const auto [world, optimizer] = GetParam();
  const auto expected = pytorch_zero_steps(world, optimizer);
  ASSERT_EQ(static_cast<int64_t>(expected.size()), kZeroParitySteps) << "the PyTorch reference did not run";
  std::vector<std::vector<double>> actual(kZeroParitySteps);
  with_communicators(world, [&](Communicator& comm) {
    auto params = zero_parity_params();
    std::shared_ptr<torch::optim::Optimizer> inner;
    if (optimizer == "adam") {
      inner = std::make_shared<torch::optim::Adam>(params, torch::optim::AdamOptions(0.01).weight_decay(0.01));
    } else {
      inner = std::make_shared<torch::optim::SGD>(params, torch::optim::SGDOptions(0.1).momentum(0.9));
    }
    auto oss = OSS::wrap(inner, comm);
    for (int64_t step = 0; step < kZeroParitySteps; ++step) {
      oss->zero_grad();
      zero_parity_loss(params, step, comm.rank()).backward();
      average_like_the_reference(params, comm);
      oss->step();
      if (comm.rank() != 0) continue;
      std::vector<torch::Tensor> flat;
      for (const auto& p : params) flat.push_back(p.detach().reshape(-1).to(torch::kDouble));
      const auto values = torch::cat(flat);
      actual[static_cast<size_t>(step)].assign(values.data_ptr<double>(), values.data_ptr<double>() + values.numel());
    }
  });
  // Bitwise, but for Adam against PyTorch 2.x: its Python Adam moves the first moment with
  // exp_avg.lerp_(grad, 1 - beta1), LibTorch's C++ Adam (which OSS wraps) with mul_ and add_, and
  // the two round differently in the last bits. There the bound is 1e-6 relative per element (of
  // at least 0.01: an element passing near zero carries its neighbours' absolute error).
  const bool lerp_adam = optimizer == "adam" && testing::reference_torch_version() != "1.13";
  for (int64_t step = 0; step < kZeroParitySteps; ++step) {
    const auto& want = expected[static_cast<size_t>(step)];
    const auto& got = actual[static_cast<size_t>(step)];
    ASSERT_EQ(got.size(), want.size()) << "step " << step;
    for (size_t i = 0; i < want.size(); ++i) {
      const double bound = lerp_adam ? 1e-6 * std::max(std::abs(want[i]), 1e-2) : 0.0;
      ASSERT_LE(std::abs(got[i] - want[i]), bound)
          << optimizer << ", " << world << " ranks: rank 0, step " << step << ", element " << i << ": " << got[i]
          << " differs from PyTorch " << testing::reference_torch_version() << "'s ZeroRedundancyOptimizer ("
          << want[i] << ")";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(RanksAndOptimizers, ZeroParity,
                         ::testing::Combine(::testing::Values(int64_t{2}, int64_t{3}),
                                            ::testing::Values(std::string("momentum"), std::string("adam"))),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "ranks_" + std::get<1>(info.param);
                         });

}  // namespace
}  // namespace volt

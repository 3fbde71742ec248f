#pragma once
// One small training problem for volt::FusedAdamW against torch::optim::AdamW (the CPU test in
// tests/trainer, the CUDA one in tests/cuda): two parameter groups with their own lr and weight
// decay, a parameter whose first gradient arrives at step 4 (so its step count lags the others),
// and one that never gets a gradient (no state may appear for it).
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <vector>

#include "run/optim/fused_adamw.h"

namespace volt::testing {

struct AdamWProblem {
  std::vector<torch::Tensor> params;  // [0..2] group 0, [3] late joiner, [4] never trained
  std::shared_ptr<torch::optim::Optimizer> optimizer;
};

using AdamWFactory =
    std::function<std::shared_ptr<torch::optim::Optimizer>(std::vector<torch::optim::OptimizerParamGroup>)>;

inline std::shared_ptr<torch::optim::Optimizer> make_fused(std::vector<torch::optim::OptimizerParamGroup> groups) {
  return std::make_shared<FusedAdamW>(std::move(groups));
}
inline std::shared_ptr<torch::optim::Optimizer> make_adamw(std::vector<torch::optim::OptimizerParamGroup> groups) {
  return std::make_shared<torch::optim::AdamW>(std::move(groups));
}

inline AdamWProblem make_adamw_problem(const AdamWFactory& make, torch::Device device, bool amsgrad) {
  torch::manual_seed(7);
  AdamWProblem problem;
  for (const auto& shape : std::vector<std::vector<int64_t>>{{16, 8}, {16}, {3, 16}, {3}, {5}}) {
    problem.params.push_back(torch::randn(shape).to(device).requires_grad_(true));
  }
  const auto& p = problem.params;
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{p[0], p[1], p[2]},
                      std::make_unique<torch::optim::AdamWOptions>(
                          torch::optim::AdamWOptions(3e-3).weight_decay(0.05).amsgrad(amsgrad)));
  groups.emplace_back(std::vector<torch::Tensor>{p[3], p[4]},
                      std::make_unique<torch::optim::AdamWOptions>(
                          torch::optim::AdamWOptions(1e-2).betas({0.8, 0.95}).eps(1e-6).amsgrad(amsgrad)));
  problem.optimizer = make(std::move(groups));
  return problem;
}

// One step on a fixed batch (seeded by `step`): a two-layer network whose output bias p[3] joins
// from step 4 on.
inline void adamw_problem_step(AdamWProblem& problem, int64_t step) {
  const auto& p = problem.params;
  const auto device = p[0].device();
  auto generator = torch::make_generator<torch::CPUGeneratorImpl>(100 + step);
  const auto x = torch::randn({32, 8}, generator).to(device);
  const auto y = torch::randn({32, 3}, generator).to(device);
  auto out = torch::linear(torch::tanh(torch::linear(x, p[0], p[1])), p[2]);
  if (step >= 4) out = out + p[3];
  problem.optimizer->zero_grad();
  torch::mse_loss(out, y).backward();
  problem.optimizer->step();
}

}  // namespace volt::testing

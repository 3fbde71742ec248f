#include "strategies/strategy.h"

#include "core/error.h"

namespace volt {

void Strategy::setup_environment(const StrategyEnvironment& environment) {
  environment_ = environment;
}

void Strategy::setup_module(Module& module) { module.to(root_device()); }

void Strategy::set_precision(std::shared_ptr<Precision> precision) {
  check<ConfigurationError>(precision != nullptr, "Strategy: expected a precision, got nullptr");
  precision_ = std::move(precision);
  // The skip decision of a GradScaler is global: any rank's inf skips every rank's step. On one
  // process all_reduce is the identity; strategies that override it make this a collective.
  precision_->set_found_inf_reducer(
      [this](const torch::Tensor& found_inf) { return all_reduce(found_inf, ReduceOp::Max); });
}

Precision& Strategy::precision() const {
  VOLT_INTERNAL_ASSERT(precision_ != nullptr, "the Trainer sets a precision before using a strategy");
  return *precision_;
}

ScopeGuard Strategy::forward_context(RunningStage stage) { return precision().forward_context(); }

void Strategy::backward(const torch::Tensor& loss) {
  pre_backward(loss);
  precision().backward(loss);
  post_backward(loss);
}

bool Strategy::optimizer_step(torch::optim::Optimizer& optimizer,
                              const std::function<void(torch::optim::Optimizer&)>& before_step) {
  precision().unscale_gradients(optimizer);
  if (before_step) before_step(optimizer);
  return precision().optimizer_step(optimizer);
}

void Strategy::after_optimizer_steps(int64_t global_step) { precision().update(); }

namespace {

std::vector<torch::Tensor> parameters_with_grad(torch::optim::Optimizer& optimizer) {
  std::vector<torch::Tensor> params;
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) {
      if (p.grad().defined()) params.push_back(p);
    }
  }
  return params;
}

}  // namespace

void Strategy::zero_grad(torch::optim::Optimizer& optimizer) {
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) {
      if (p.grad().defined()) p.mutable_grad().reset();
    }
  }
}

double Strategy::clip_gradients_norm(torch::optim::Optimizer& optimizer, double max_norm,
                                     double norm_type) {
  return torch::nn::utils::clip_grad_norm_(parameters_with_grad(optimizer), max_norm, norm_type);
}

void Strategy::clip_gradients_value(torch::optim::Optimizer& optimizer, double clip_value) {
  torch::nn::utils::clip_grad_value_(parameters_with_grad(optimizer), clip_value);
}

}  // namespace volt

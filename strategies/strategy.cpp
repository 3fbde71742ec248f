#include "strategies/strategy.h"

#include "core/error.h"
#include "data/sampler.h"
#include "strategies/dense_gradients.h"
#include "strategies/sharded_optimizer.h"

namespace volt {

void Strategy::setup_environment(const StrategyEnvironment& environment) {
  environment_ = environment;
}

void Strategy::setup_module(torch::nn::Module& module) {
  if (is_distributed()) refuse_sparse_gradient_modules(module, name());  // Note [Sparse gradients]
  precision().convert_module(module);
  module.to(root_device());
  wrap_module(module);
}

void Strategy::set_precision(std::shared_ptr<Precision> precision) {
  check<ConfigurationError>(precision != nullptr, "Strategy: expected a precision, got nullptr");
  check_precision(*precision);
  precision_ = std::move(precision);
  // The skip decision of a GradScaler is global: any rank's inf skips every rank's step. On one
  // process all_reduce is the identity; strategies that override it make this a collective.
  precision_->set_found_inf_reducer(
      [this](const torch::Tensor& found_inf) { return all_reduce(found_inf, ReduceOp::Max); });
}

std::map<std::string, double> Strategy::metrics() const {
  return precision_ ? precision_->metrics() : std::map<std::string, double>{};
}

Precision& Strategy::precision() const {
  VOLT_INTERNAL_ASSERT(precision_ != nullptr, "the Trainer sets a precision before using a strategy");
  return *precision_;
}

std::shared_ptr<DataLoader> Strategy::distribute_loader(std::shared_ptr<DataLoader> loader, RunningStage stage) const {
  const auto topology = this->topology();
  if (topology.world_size == 1) return loader;
  auto copy = std::make_shared<DataLoader>(loader->dataset_ptr(), loader->options());
  const int64_t n = loader->dataset().size();
  const auto& options = loader->options();
  if (stage == RunningStage::Training) {
    copy->set_sampler(std::make_shared<DistributedSampler>(n, topology.world_size, topology.global_rank,
                                                           options.shuffle, loader->seed(), options.drop_last));
  } else if (evaluation_needs_equal_steps()) {
    copy->set_sampler(std::make_shared<DistributedSampler>(n, topology.world_size, topology.global_rank,
                                                           /*shuffle=*/false, loader->seed(), /*drop_last=*/false));
  } else {
    copy->set_sampler(std::make_shared<UnpaddedDistributedSampler>(n, topology.world_size, topology.global_rank));
  }
  return copy;
}

Batch Strategy::batch_to_device(const Batch& batch) const { return precision().convert_input(batch.to(root_device())); }

torch::Tensor Strategy::run_step(RunningStage stage, torch::nn::Module& module, const Batch& batch,
                                 const StepFunction& step) {
  auto context = forward_context(stage);
  return step(module, batch);
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
  precision().unscale_gradients(optimizer);  // once per step: inside optimizer_step it already ran
  // Over every rank's shard, each parameter counted once.
  if (auto* sharded = dynamic_cast<ShardedOptimizer*>(&optimizer)) return sharded->clip_grad_norm(max_norm, norm_type);
  return torch::nn::utils::clip_grad_norm_(parameters_with_grad(optimizer), max_norm, norm_type);
}

void Strategy::clip_gradients_value(torch::optim::Optimizer& optimizer, double clip_value) {
  precision().unscale_gradients(optimizer);
  torch::nn::utils::clip_grad_value_(parameters_with_grad(optimizer), clip_value);
}

}  // namespace volt

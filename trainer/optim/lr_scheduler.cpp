#include "trainer/optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace volt {

LRScheduler::LRScheduler(torch::optim::Optimizer& optimizer) : optimizer_(&optimizer) {
  for (auto& group : optimizer_->param_groups()) base_lrs_.push_back(group.options().get_lr());
}

void LRScheduler::rebind(torch::optim::Optimizer& replacement) {
  check<ConfigurationError>(replacement.param_groups().size() == optimizer_->param_groups().size(),
                            "LR scheduler: expected a replacement optimizer with ", optimizer_->param_groups().size(),
                            " param groups, got ", replacement.param_groups().size());
  optimizer_ = &replacement;
}

void LRScheduler::step() {
  ++last_epoch_;
  apply();
}

void LRScheduler::apply() {
  auto& groups = optimizer_->param_groups();
  check<ConfigurationError>(groups.size() == base_lrs_.size(), "LRScheduler: the optimizer has ",
                            groups.size(), " param groups but the scheduler was built for ",
                            base_lrs_.size(), "; build the scheduler after adding every group");
  for (size_t i = 0; i < groups.size(); ++i) {
    groups[i].options().set_lr(lr_at(last_epoch_, base_lrs_[i]));
  }
}

std::vector<double> LRScheduler::last_lr() const {
  std::vector<double> lrs;
  for (auto& group : optimizer_->param_groups()) lrs.push_back(group.options().get_lr());
  return lrs;
}

StateDict LRScheduler::state_dict() const {
  StateDict state;
  state.set("last_epoch", last_epoch_);
  state.set("base_lrs", c10::List<double>(base_lrs_));
  state.set("_last_lr", c10::List<double>(last_lr()));
  return state;
}

void LRScheduler::load_state_dict(const StateDict& state) {
  check<CheckpointError>(state.contains("last_epoch") && state.contains("base_lrs"),
                         "LRScheduler: expected keys last_epoch and base_lrs in the scheduler state");
  auto base = state.get_doubles("base_lrs");
  check<CheckpointError>(base.size() == base_lrs_.size(), "LRScheduler: the checkpoint has ",
                         base.size(), " param groups, this optimizer has ", base_lrs_.size());
  base_lrs_ = std::move(base);
  last_epoch_ = state.get_int("last_epoch");
  apply();
}

StepLR::StepLR(torch::optim::Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  check<ConfigurationError>(step_size >= 1, "StepLR: expected step_size >= 1, got ", step_size);
}

double StepLR::lr_at(int64_t epoch, double base_lr) const {
  return base_lr * std::pow(gamma_, static_cast<double>(epoch / step_size_));
}

MultiStepLR::MultiStepLR(torch::optim::Optimizer& optimizer, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(optimizer), milestones_(std::move(milestones)), gamma_(gamma) {
  check<ConfigurationError>(std::is_sorted(milestones_.begin(), milestones_.end()),
                            "MultiStepLR: expected milestones in increasing order");
}

double MultiStepLR::lr_at(int64_t epoch, double base_lr) const {
  const auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), epoch) - milestones_.begin();
  return base_lr * std::pow(gamma_, static_cast<double>(passed));
}

ExponentialLR::ExponentialLR(torch::optim::Optimizer& optimizer, double gamma)
    : LRScheduler(optimizer), gamma_(gamma) {}

double ExponentialLR::lr_at(int64_t epoch, double base_lr) const {
  return base_lr * std::pow(gamma_, static_cast<double>(epoch));
}

CosineAnnealingLR::CosineAnnealingLR(torch::optim::Optimizer& optimizer, int64_t t_max, double eta_min)
    : LRScheduler(optimizer), t_max_(t_max), eta_min_(eta_min) {
  check<ConfigurationError>(t_max >= 1, "CosineAnnealingLR: expected t_max >= 1, got ", t_max);
}

double CosineAnnealingLR::lr_at(int64_t epoch, double base_lr) const {
  return eta_min_ + (base_lr - eta_min_) * (1 + std::cos(M_PI * static_cast<double>(epoch) /
                                                         static_cast<double>(t_max_))) / 2;
}

LambdaLR::LambdaLR(torch::optim::Optimizer& optimizer, std::function<double(int64_t)> factor)
    : LRScheduler(optimizer), factor_(std::move(factor)) {
  check<ConfigurationError>(static_cast<bool>(factor_), "LambdaLR: expected a factor function");
}

double LambdaLR::lr_at(int64_t epoch, double base_lr) const { return base_lr * factor_(epoch); }

}  // namespace volt

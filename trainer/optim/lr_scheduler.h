#pragma once
// Learning-rate schedules with torch.optim.lr_scheduler's closed forms. A scheduler owns no
// optimizer state beyond its own counter: each step() writes lr = schedule(last_epoch) into every
// param group of its optimizer, so a restored counter reproduces the schedule exactly.
#include <torch/torch.h>

#include <functional>
#include <vector>

#include "core/state_dict.h"

namespace volt {

class LRScheduler {
 public:
  // Records each param group's current lr as its base lr. The optimizer must outlive the scheduler.
  explicit LRScheduler(torch::optim::Optimizer& optimizer);
  virtual ~LRScheduler() = default;

  // Advances the counter by one and applies the new learning rates.
  void step();
  int64_t last_epoch() const { return last_epoch_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  // The learning rate of each param group as last applied.
  std::vector<double> last_lr() const;
  torch::optim::Optimizer& optimizer() const { return *optimizer_; }
  // Acts on `replacement` from now on: a strategy replaced the optimizer this scheduler was built
  // for by a wrapper with the same param groups (e.g. a sharded optimizer, OSS). Throws
  // ConfigurationError when the number of param groups differs.
  void rebind(torch::optim::Optimizer& replacement);

  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 protected:
  // Learning rate of a group with base lr `base_lr` after `epoch` steps.
  virtual double lr_at(int64_t epoch, double base_lr) const = 0;

 private:
  void apply();

  torch::optim::Optimizer* optimizer_;
  std::vector<double> base_lrs_;
  int64_t last_epoch_ = 0;
};

// lr = base · gamma^⌊epoch / step_size⌋
class StepLR : public LRScheduler {
 public:
  StepLR(torch::optim::Optimizer& optimizer, int64_t step_size, double gamma = 0.1);

 protected:
  double lr_at(int64_t epoch, double base_lr) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// lr = base · gamma^(number of milestones <= epoch)
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(torch::optim::Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1);

 protected:
  double lr_at(int64_t epoch, double base_lr) const override;

 private:
  std::vector<int64_t> milestones_;
  double gamma_;
};

// lr = base · gamma^epoch
class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(torch::optim::Optimizer& optimizer, double gamma);

 protected:
  double lr_at(int64_t epoch, double base_lr) const override;

 private:
  double gamma_;
};

// lr = eta_min + (base − eta_min) · (1 + cos(π · epoch / t_max)) / 2
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(torch::optim::Optimizer& optimizer, int64_t t_max, double eta_min = 0.0);

 protected:
  double lr_at(int64_t epoch, double base_lr) const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

// lr = base · factor(epoch)
class LambdaLR : public LRScheduler {
 public:
  LambdaLR(torch::optim::Optimizer& optimizer, std::function<double(int64_t)> factor);

 protected:
  double lr_at(int64_t epoch, double base_lr) const override;

 private:
  std::function<double(int64_t)> factor_;
};

}  // namespace volt

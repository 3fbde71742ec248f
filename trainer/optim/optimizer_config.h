#pragma once
// What Module::configure_optimizers returns: one or more optimizers and their LR schedulers,
// Lightning's shape. With several optimizers every one of them steps after each accumulation
// window (they must own disjoint parameters).
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "trainer/optim/lr_scheduler.h"

namespace volt {

enum class SchedulerInterval { Step, Epoch };

struct SchedulerConfig {
  std::shared_ptr<LRScheduler> scheduler;
  SchedulerInterval interval = SchedulerInterval::Epoch;  // advance per optimizer step or per epoch
  int64_t frequency = 1;                                  // advance every `frequency` intervals; >= 1
  std::string name;  // LearningRateMonitor's key; default "lr-<OptimizerClass>"
};

struct OptimizerConfig {
  std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers;
  std::vector<SchedulerConfig> schedulers;

  OptimizerConfig() = default;
  OptimizerConfig(std::shared_ptr<torch::optim::Optimizer> optimizer)  // NOLINT: implicit on purpose
      : optimizers{std::move(optimizer)} {}
  OptimizerConfig(std::shared_ptr<torch::optim::Optimizer> optimizer, SchedulerConfig scheduler)
      : optimizers{std::move(optimizer)}, schedulers{std::move(scheduler)} {}

  // Throws ConfigurationError for no optimizer, a null entry, a frequency < 1, a scheduler whose
  // optimizer is not in `optimizers`, or a parameter owned by two optimizers.
  void validate() const;
};

}  // namespace volt

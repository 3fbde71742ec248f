#pragma once
// What Module::configure_optimizers returns: one or more optimizers and their LR schedulers,
// Lightning's shape. With several optimizers every one of them steps after each accumulation
// window (they must own disjoint parameters).
//
// Note [configure_optimizers forms] Every form a LibTorch user writes first converts directly,
// the way Lightning accepts an optimizer, a pair, or lists:
//   return std::make_shared<torch::optim::SGD>(parameters(), 0.1);          // one optimizer
//   return {optimizer, std::make_shared<volt::StepLR>(*optimizer, 10)};     // optimizer + scheduler
//   return {optimizer, {scheduler, volt::SchedulerInterval::Step}};         // ... with its interval
//   return {generator_optimizer, {discriminator_optimizer, scheduler}};     // a list of the above
//   return {{sgd, adam}, {sgd_scheduler, adam_scheduler}};                  // Lightning's two lists
// The constructors from shared_ptr<Derived> are templates because a shared_ptr<SGD> reaches
// shared_ptr<Optimizer> only through a user-defined conversion, and C++ allows one per
// implicit conversion sequence: without them the first line above does not compile.
#include <torch/torch.h>

#include <concepts>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "trainer/optim/lr_scheduler.h"

namespace volt {

enum class SchedulerInterval { Step, Epoch };

template <typename T>
concept OptimizerType = std::derived_from<T, torch::optim::Optimizer>;
template <typename T>
concept LRSchedulerType = std::derived_from<T, LRScheduler>;

struct SchedulerConfig {
  std::shared_ptr<LRScheduler> scheduler;
  SchedulerInterval interval = SchedulerInterval::Epoch;  // advance per optimizer step or per epoch
  int64_t frequency = 1;                                  // advance every `frequency` intervals; >= 1
  std::string name;  // LearningRateMonitor's key; default "lr-<OptimizerClass>"

  SchedulerConfig() = default;
  template <LRSchedulerType Scheduler>
  SchedulerConfig(std::shared_ptr<Scheduler> scheduler,  // NOLINT: implicit on purpose
                  SchedulerInterval interval = SchedulerInterval::Epoch, int64_t frequency = 1,
                  std::string name = {})
      : scheduler(std::move(scheduler)), interval(interval), frequency(frequency), name(std::move(name)) {}
};

struct OptimizerConfig {
  std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers;
  std::vector<SchedulerConfig> schedulers;

  OptimizerConfig() = default;
  template <OptimizerType Optimizer>
  OptimizerConfig(std::shared_ptr<Optimizer> optimizer)  // NOLINT: implicit on purpose
      : optimizers{std::move(optimizer)} {}
  template <OptimizerType Optimizer>
  OptimizerConfig(std::shared_ptr<Optimizer> optimizer, SchedulerConfig scheduler)
      : optimizers{std::move(optimizer)}, schedulers{std::move(scheduler)} {}
  template <OptimizerType Optimizer, LRSchedulerType Scheduler>
  OptimizerConfig(std::shared_ptr<Optimizer> optimizer, std::shared_ptr<Scheduler> scheduler)
      : OptimizerConfig(std::move(optimizer), SchedulerConfig(std::move(scheduler))) {}
  // Lightning's `return [optimizers], [schedulers]`, also for lists built at run time.
  OptimizerConfig(std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers,  // NOLINT: implicit
                  std::vector<SchedulerConfig> schedulers = {})
      : optimizers(std::move(optimizers)), schedulers(std::move(schedulers)) {}
  // A list of the forms above, concatenated in order.
  OptimizerConfig(std::initializer_list<OptimizerConfig> parts);

  // Throws ConfigurationError for no optimizer, a null entry, a frequency < 1, a scheduler whose
  // optimizer is not in `optimizers`, or a parameter owned by two optimizers.
  void validate() const;
};

}  // namespace volt

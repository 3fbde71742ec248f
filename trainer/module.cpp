#include "trainer/module.h"

#include "trainer/loops/loop_context.h"
#include "trainer/loops/loop_hooks.h"
#include "trainer/loops/loop_state.h"
#include "trainer/trainer.h"
#include "strategies/strategy.h"

namespace volt {

void Module::validation_step(const Batch&, int64_t) {
  throw StepNotDefined("Module: validation_step is not defined");
}

void Module::test_step(const Batch&, int64_t) {
  throw StepNotDefined("Module: test_step is not defined; override it to run Trainer::test");
}

torch::Tensor Module::predict_step(const Batch&, int64_t) {
  throw StepNotDefined("Module: predict_step is not defined; override it to run Trainer::predict");
}

const Trainer& Module::trainer() const {
  check<ConfigurationError>(loop_ != nullptr,
                            "Module: no Trainer is running this module; call trainer.fit/validate/test first");
  return loop_->trainer;
}

int64_t Module::current_epoch() const { return loop_ ? loop_->trainer.current_epoch() : 0; }
int64_t Module::global_step() const { return loop_ ? loop_->trainer.global_step() : 0; }
int64_t Module::global_rank() const { return loop_ ? loop_->trainer.global_rank() : 0; }
int64_t Module::local_rank() const { return loop_ ? loop_->trainer.local_rank() : 0; }
int64_t Module::world_size() const { return loop_ ? loop_->trainer.world_size() : 1; }

void Module::manual_backward(const torch::Tensor& loss) {
  require_manual_optimization(loop_ ? &loop_->state : nullptr, *this, "manual_backward");
  check<ConfigurationError>(loss.defined() && loss.numel() == 1 && loss.requires_grad(),
                            "manual_backward: expected a scalar loss computed from the module's parameters");
  backward_with_hooks(*loop_, *this, loss);
}

const std::vector<std::shared_ptr<ManualOptimizer>>& Module::optimizers() const {
  check<ConfigurationError>(loop_ != nullptr && loop_->state.fn == TrainerFn::Fitting,
                            "optimizers(): only while Trainer::fit runs this module");
  return loop_->state.manual_optimizers;
}

ManualOptimizer& Module::optimizer(size_t index) const {
  const auto& all = optimizers();
  check<ConfigurationError>(index < all.size(), "optimizer(", index, "): configure_optimizers returned ",
                            all.size(), " optimizer(s)");
  return *all[index];
}

std::vector<std::shared_ptr<LRScheduler>> Module::lr_schedulers() const {
  check<ConfigurationError>(loop_ != nullptr && loop_->state.fn == TrainerFn::Fitting,
                            "lr_schedulers(): only while Trainer::fit runs this module");
  std::vector<std::shared_ptr<LRScheduler>> schedulers;
  for (const auto& config : loop_->state.schedulers) schedulers.push_back(config.scheduler);
  return schedulers;
}

torch::Tensor Module::clip_gradients(ManualOptimizer& optimizer, double clip_val, GradientClipAlgorithm algorithm) {
  require_manual_optimization(loop_ ? &loop_->state : nullptr, *this, "clip_gradients");
  check<ConfigurationError>(clip_val > 0, "clip_gradients: expected clip_val > 0, got ", clip_val);
  return volt::clip_gradients(loop_->strategy, optimizer.optimizer(), clip_val, algorithm);
}

ScopeGuard Module::no_sync() {
  require_manual_optimization(loop_ ? &loop_->state : nullptr, *this, "no_sync");
  return loop_->strategy.gradients().no_sync();
}

void Module::log(const std::string& name, const torch::Tensor& value, const LogOptions& options) {
  check<ConfigurationError>(loop_ != nullptr, "log('", name,
                            "'): no Trainer is running this module; log from a step or hook");
  loop_->state.active_collector().log(name, value, options);
}

void Module::log(const std::string& name, double value, const LogOptions& options) {
  log(name, torch::scalar_tensor(value, torch::kDouble), options);
}

Module& step_module(torch::nn::Module& given, Module& running) {
  if (&given == &running) return running;
  auto* replica = dynamic_cast<Module*>(&given);
  VOLT_INTERNAL_ASSERT(replica != nullptr, "the strategy handed a step a module that is not a volt::Module");
  replica->loop_ = running.loop_;
  return *replica;
}

}  // namespace volt

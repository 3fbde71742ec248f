#pragma once
// Manual optimization (Lightning's automatic_optimization = False): a module whose
// automatic_optimization() is false gets its optimizers as ManualOptimizers (Module::optimizers())
// and steps them itself from training_step. Each is one of the Trainer's optimizers as the strategy
// set it up (possibly a sharded wrapper), driven through the same strategy and precision calls the
// automatic loop makes: nothing about stepping is implemented twice.
#include <torch/torch.h>

#include <memory>
#include <string>

#include "core/scope_guard.h"

namespace volt {

class Module;
class Strategy;
struct LoopContext;
struct LoopState;

// Refuses (ConfigurationError naming `what`) a call that only a module in manual optimization may
// make, and only from training_step: `state` is the module's loop state (null when no Trainer
// runs it).
void require_manual_optimization(const LoopState* state, const Module& module, const std::string& what);

class ManualOptimizer {
 public:
  ManualOptimizer(const LoopContext& context, std::shared_ptr<torch::optim::Optimizer> optimizer);

  // One optimizer step, as the automatic loop takes it: unscales the gradients (mixed precision;
  // once, also when clip_gradients did it already), runs the on_before_optimizer_step hooks, steps
  // through the precision, counts a global step (Lightning's: every optimizer's step counts, so
  // max_steps and log_every_n_steps count them too), then lets the strategy act after it
  // (periodic model averaging, SlowMo, the GradScaler's update). Returns false when the
  // GradScaler skipped the step for inf/NaN gradients.
  bool step();
  // Clears the gradients the way the strategy keeps them (undefined, or zeroed bucket views).
  void zero_grad();
  // A scope for this optimizer's forward/backward: the parameters only *other* optimizers train
  // stop requiring gradients (restored at the end), and with sync_grad false the strategy does
  // not synchronize gradients in backward (DDP's no_sync: accumulate by hand, synchronize on the
  // window's last micro-batch).
  ScopeGuard toggle_model(bool sync_grad = true);

  torch::optim::Optimizer& optimizer() const { return *optimizer_; }
  // Steps this optimizer skipped (mixed precision found inf/NaN gradients).
  int64_t skipped_steps() const { return skipped_steps_; }

 private:
  const LoopContext& context_;
  Strategy& strategy_;  // context_.strategy
  LoopState& state_;
  std::shared_ptr<torch::optim::Optimizer> optimizer_;
  int64_t skipped_steps_ = 0;
};

}  // namespace volt

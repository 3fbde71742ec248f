#pragma once
// volt::Module — the user's model: what a step computes, which optimizers train it, and hooks into
// the loop. Lightning's LightningModule, as a torch::nn::Module.
#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/scope_guard.h"
#include "data/batch.h"
#include "core/error.h"
#include "core/hyperparameters.h"
#include "trainer/gradient_clip_algorithm.h"
#include "core/in_step_hook_probe.h"
#include "trainer/metrics/log_options.h"
#include "trainer/optim/manual_optimizer.h"
#include "trainer/optim/optimizer_config.h"
#include "core/state_dict.h"

namespace volt {

class Trainer;
struct LoopContext;

// Thrown by the default validation_step/test_step/predict_step: the Trainer treats it as "this
// module does not define that step" (skipping validation, or failing test/predict clearly).
class StepNotDefined : public Error {
 public:
  using Error::Error;
};

class Module : public torch::nn::Module {
 public:
  // The loss of one (micro-)batch. Returning an undefined tensor skips this batch's backward; a
  // window whose micro-batches all return undefined takes no optimizer step.
  virtual torch::Tensor training_step(const Batch& batch, int64_t batch_idx) = 0;
  virtual void validation_step(const Batch& batch, int64_t batch_idx);
  virtual void test_step(const Batch& batch, int64_t batch_idx);
  virtual torch::Tensor predict_step(const Batch& batch, int64_t batch_idx);
  virtual OptimizerConfig configure_optimizers() = 0;

  // Lightning's configure_model: build layers here rather than in the constructor. The Trainer
  // calls it on every rank at the start of every fit, validate, test and predict, after the
  // callbacks' setup and before the strategy sets the module up (precision, device, wrapping), so
  // a strategy's policies see what it builds. It runs once per call of the Trainer: build only
  // what is not built yet (`if (!blocks) blocks = register_module(...)`). What it builds is whole
  // on each rank until the strategy shards it.
  virtual void configure_model() {}

  // Hooks, in the order the loop calls them; by default they do nothing.
  virtual void on_fit_start() {}
  virtual void on_train_epoch_start() {}
  // The hooks inside a step say that their default body ran (Note [Hooks inside a captured phase]).
  virtual void on_before_backward(const torch::Tensor& loss) { InStepHookProbe::default_body_ran(); }
  virtual void on_after_backward() { InStepHookProbe::default_body_ran(); }
  virtual void on_before_optimizer_step(torch::optim::Optimizer& optimizer) { InStepHookProbe::default_body_ran(); }
  virtual void on_before_zero_grad(torch::optim::Optimizer& optimizer) { InStepHookProbe::default_body_ran(); }
  virtual void on_train_epoch_end() {}
  virtual void on_validation_epoch_start() {}
  virtual void on_validation_epoch_end() {}
  virtual void on_test_epoch_start() {}
  virtual void on_test_epoch_end() {}
  virtual void on_fit_end() {}
  // The checkpoint being written (add entries beside volt's) / read, before the weights load.
  virtual void on_save_checkpoint(StateDict& checkpoint) {}
  virtual void on_load_checkpoint(const StateDict& checkpoint) {}

  // ---- manual optimization (Lightning's automatic_optimization = False)
  // Returning false makes the Trainer call training_step and leave backward, stepping, zeroing,
  // clipping and the schedulers to it (several optimizers, e.g. a GAN's; accumulation by hand):
  //   auto& opt = optimizer();
  //   { auto scope = opt.toggle_model(/*sync_grad=*/last_micro_batch); manual_backward(loss / k); }
  //   if (last_micro_batch) { clip_gradients(opt, 1.0); opt.step(); opt.zero_grad(); }
  // --accumulate-grad-batches and --gradient-clip-val are then refused (do them here instead);
  // what training_step returns is not backpropagated.
  virtual bool automatic_optimization() const { return true; }
  // Backward of `loss` as the Trainer runs it: the backward hooks, the precision's loss scaling
  // and the strategy's gradient synchronization (unless inside toggle_model(false) / no_sync()).
  void manual_backward(const torch::Tensor& loss);
  // The optimizers configure_optimizers returned, in its order, as the strategy set them up.
  const std::vector<std::shared_ptr<ManualOptimizer>>& optimizers() const;
  ManualOptimizer& optimizer(size_t index = 0) const;
  // The schedulers configure_optimizers returned; in manual optimization the module steps them.
  std::vector<std::shared_ptr<LRScheduler>> lr_schedulers() const;
  // Clips `optimizer`'s gradients at their true scale (mixed precision unscales them first, once
  // per step) the way the strategy computes norms (a sharded one over all shards). Returns the
  // total norm before clipping as a 0-dim tensor on the gradients' device (Norm; read it with
  // .item() when needed, which waits for the device) or an undefined tensor (Value).
  torch::Tensor clip_gradients(ManualOptimizer& optimizer, double clip_val,
                                       GradientClipAlgorithm algorithm = GradientClipAlgorithm::Norm);
  // Backward passes inside this scope do not synchronize gradients (DDP's no_sync).
  ScopeGuard no_sync();

  // Records a scalar for the loggers, the progress bar and callbacks (see LogOptions for the
  // defaults, which depend on the hook that logs). Valid only while a Trainer runs this module.
  void log(const std::string& name, const torch::Tensor& value, const LogOptions& options = {});
  void log(const std::string& name, double value, const LogOptions& options = {});

  // Hyperparameters are logged by every logger at fit start and stored in checkpoints.
  void save_hyperparameters(Hyperparameters hparams) { hparams_ = std::move(hparams); }
  const Hyperparameters& hparams() const { return hparams_; }

  // The Trainer running this module; throws ConfigurationError when none is.
  const Trainer& trainer() const;
  int64_t current_epoch() const;
  int64_t global_step() const;
  // The running Trainer's global_rank(), local_rank() and world_size() (LightningModule's
  // global_rank and local_rank); 0, 0 and 1 when no Trainer runs this module.
  int64_t global_rank() const;
  int64_t local_rank() const;
  int64_t world_size() const;

 private:
  friend class Trainer;
  friend Module& step_module(torch::nn::Module& given, Module& running);
  // Set by the Trainer for the duration of fit/validate/test/predict (Note [Loop context]): who
  // runs this module, the strategy its helpers act through, and the loop state whose active
  // metric collector log() feeds.
  const LoopContext* loop_ = nullptr;
  Hyperparameters hparams_;
};

}  // namespace volt

#pragma once
// volt::Callback — code that hooks into the Trainer's loop without touching the model: every
// hook is a no-op by default, and the Trainer calls each one through a typed member pointer (no
// dispatch by string). A callback sees the Trainer's public state, never a strategy's insides.
//
// Hooks run on every rank; a callback that writes files or prints checks
// trainer.is_global_zero(), and a decision that must agree across ranks goes through
// trainer.collectives().broadcast_decision().
#include <torch/torch.h>

#include <string>

#include "data/batch.h"
#include "core/state_dict.h"
#include "core/in_step_hook_probe.h"

namespace volt {

class Trainer;
class Module;

// Which of the Trainer's default callbacks a callback stands in for: the Trainer adds a default
// progress bar, model summary or checkpoint callback (Lightning's defaults) only where none of
// the user's callbacks has that role, and runs the checkpoint callbacks last at every hook.
enum class CallbackRole { Other, ProgressBar, ModelSummary, Checkpoint };

class Callback {
 public:
  virtual ~Callback() = default;
  // The built-ins say theirs; a user's callback that replaces one (its own progress bar, say)
  // returns that role, and the Trainer adds no default of it.
  virtual CallbackRole role() const { return CallbackRole::Other; }

  // Identifies this callback's state in a checkpoint. Two instances of one class with different
  // settings must return different keys (e.g. "ModelCheckpoint{monitor=val_acc,mode=max}").
  virtual std::string state_key() const;
  virtual StateDict state_dict() const { return {}; }
  virtual void load_state_dict(const StateDict& state) {}

  virtual void setup(Trainer& trainer, Module& module, const std::string& stage) {}
  virtual void teardown(Trainer& trainer, Module& module, const std::string& stage) {}

  virtual void on_fit_start(Trainer& trainer, Module& module) {}
  virtual void on_fit_end(Trainer& trainer, Module& module) {}
  virtual void on_sanity_check_start(Trainer& trainer, Module& module) {}
  virtual void on_sanity_check_end(Trainer& trainer, Module& module) {}

  virtual void on_train_start(Trainer& trainer, Module& module) {}
  virtual void on_train_end(Trainer& trainer, Module& module) {}
  virtual void on_train_epoch_start(Trainer& trainer, Module& module) {}
  virtual void on_train_epoch_end(Trainer& trainer, Module& module) {}
  virtual void on_train_batch_start(Trainer& trainer, Module& module, const Batch& batch,
                                    int64_t batch_idx) {}
  // `loss` is what training_step returned (undefined when it skipped the batch).
  virtual void on_train_batch_end(Trainer& trainer, Module& module, const torch::Tensor& loss,
                                  const Batch& batch, int64_t batch_idx) {}

  virtual void on_validation_start(Trainer& trainer, Module& module) {}
  virtual void on_validation_end(Trainer& trainer, Module& module) {}
  virtual void on_validation_epoch_start(Trainer& trainer, Module& module) {}
  virtual void on_validation_epoch_end(Trainer& trainer, Module& module) {}
  virtual void on_validation_batch_start(Trainer& trainer, Module& module, const Batch& batch,
                                         int64_t batch_idx) {}
  virtual void on_validation_batch_end(Trainer& trainer, Module& module, const Batch& batch,
                                       int64_t batch_idx) {}

  virtual void on_test_start(Trainer& trainer, Module& module) {}
  virtual void on_test_end(Trainer& trainer, Module& module) {}
  virtual void on_test_epoch_start(Trainer& trainer, Module& module) {}
  virtual void on_test_epoch_end(Trainer& trainer, Module& module) {}
  virtual void on_test_batch_start(Trainer& trainer, Module& module, const Batch& batch,
                                   int64_t batch_idx) {}
  virtual void on_test_batch_end(Trainer& trainer, Module& module, const Batch& batch,
                                 int64_t batch_idx) {}

  virtual void on_predict_start(Trainer& trainer, Module& module) {}
  virtual void on_predict_end(Trainer& trainer, Module& module) {}
  virtual void on_predict_batch_start(Trainer& trainer, Module& module, const Batch& batch,
                                      int64_t batch_idx) {}
  virtual void on_predict_batch_end(Trainer& trainer, Module& module,
                                    const torch::Tensor& prediction, const Batch& batch,
                                    int64_t batch_idx) {}

  // The hooks inside a step: their default bodies say that they ran, so that --cuda-graph can
  // tell an overridden one (Note [Hooks inside a captured phase]).
  virtual void on_before_backward(Trainer& trainer, Module& module, const torch::Tensor& loss) {
    InStepHookProbe::default_body_ran();
  }
  virtual void on_after_backward(Trainer& trainer, Module& module) { InStepHookProbe::default_body_ran(); }
  virtual void on_before_optimizer_step(Trainer& trainer, Module& module, torch::optim::Optimizer& optimizer) {
    InStepHookProbe::default_body_ran();
  }
  virtual void on_before_zero_grad(Trainer& trainer, Module& module, torch::optim::Optimizer& optimizer) {
    InStepHookProbe::default_body_ran();
  }

  // The checkpoint being written / read, to add to or read from beside this callback's state.
  virtual void on_save_checkpoint(Trainer& trainer, Module& module, StateDict& checkpoint) {}
  virtual void on_load_checkpoint(Trainer& trainer, Module& module, const StateDict& checkpoint) {}

  virtual void on_exception(Trainer& trainer, Module& module, const std::exception& error) {}
};

}  // namespace volt

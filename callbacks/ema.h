#pragma once
#include <vector>

#include "callbacks/callback.h"
#include "core/option_schema.h"

namespace volt {

struct EMAOptions {
  double decay = 0.999;              // weight of the old average per update, in [0, 1]
  int64_t update_every_n_steps = 1;  // optimizer steps between updates; >= 1
  bool validate_with_ema = true;     // validate with the averaged weights
  bool apply_at_end = true;          // leave the averaged weights in the module after fit

  static const OptionSchema<EMAOptions>& schema();
  void validate() const { schema().validate(*this); }
};

// An exponential moving average of the module's trainable parameters:
//   ema ← decay · ema + (1 − decay) · θ
// after every `update_every_n_steps`-th optimizer step (the first update copies θ). With
// `validate_with_ema` the average replaces the weights for every validation inside fit (the
// sanity check included once an average exists) and the trained weights come back afterwards,
// also when validation fails. With `apply_at_end` the average becomes the module's weights when
// training ends, so test/predict and the last checkpoint use it. Buffers (e.g. batch-norm
// statistics) are not averaged. The average is kept in float32 or wider, on the parameters'
// device, and is checkpointed under this callback's state.
class EMA : public Callback {
 public:
  explicit EMA(EMAOptions options);
  explicit EMA(double decay = 0.999, int64_t update_every_n_steps = 1, bool validate_with_ema = true,
               bool apply_at_end = true);

  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;

  void on_train_start(Trainer& trainer, Module& module) override;
  void on_train_batch_end(Trainer& trainer, Module& module, const torch::Tensor& loss, const Batch& batch,
                          int64_t batch_idx) override;
  void on_validation_start(Trainer& trainer, Module& module) override;
  void on_validation_end(Trainer& trainer, Module& module) override;
  void on_train_end(Trainer& trainer, Module& module) override;
  void on_exception(Trainer& trainer, Module& module, const std::exception& error) override;

  // The averaged parameters, by parameter name (empty before the first update).
  std::map<std::string, torch::Tensor> averages() const;
  int64_t num_updates() const { return num_updates_; }

 private:
  void update(Module& module);
  void copy_average_into(Module& module);
  void restore_trained_weights(Module& module);

  double decay_;
  int64_t update_every_n_steps_;
  bool validate_with_ema_;
  bool apply_at_end_;
  int64_t num_updates_ = 0;
  int64_t last_step_seen_ = -1;
  std::vector<std::string> names_;
  std::vector<torch::Tensor> average_;
  std::vector<torch::Tensor> trained_backup_;  // the trained weights while the average is swapped in
};

}  // namespace volt

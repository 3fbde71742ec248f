#pragma once
#include <optional>
#include <string>

#include "callbacks/callback.h"
#include "callbacks/monitor.h"
#include "core/option_schema.h"

namespace volt {

struct EarlyStoppingOptions {
  std::string monitor;                        // metric to watch (required), e.g. "val_loss"
  double min_delta = 0.0;                     // an improvement must beat the best by more than this; >= 0
  int64_t patience = 3;                       // checks without improvement before stopping; >= 0
  MonitorMode mode = MonitorMode::Min;        // whether smaller or larger is better
  bool strict = true;                         // a missing metric is an error (else: the check is skipped)
  bool check_finite = true;                   // stop at once when the metric is NaN or infinite
  std::optional<double> stopping_threshold;   // stop at once when the metric is better than this
  std::optional<double> divergence_threshold; // stop at once when the metric is worse than this
  // Check after each training epoch (true) or after each validation (false). Unset: after each
  // training epoch when validation runs exactly once per epoch (val_check_interval 1.0,
  // check_val_every_n_epoch 1), Lightning's rule; after each validation otherwise.
  std::optional<bool> check_on_train_epoch_end;
  bool verbose = false;                       // print each improvement and the stop reason (rank 0)

  static const OptionSchema<EarlyStoppingOptions>& schema();
  void validate() const { schema().validate(*this); }  // throws ConfigurationError naming the option
};

// Stops fit when a monitored metric stops improving, Lightning's EarlyStopping. Each check, in
// order: not finite (check_finite) → stop; better than stopping_threshold → stop; worse than
// divergence_threshold → stop; better than best by more than min_delta → new best, wait 0;
// otherwise wait + 1, and stop once wait reaches patience. The decision is rank 0's, broadcast
// through the strategy (a collective), so every rank stops at the same step. Checks are skipped
// during the sanity check and outside fit. Its state (best, wait, stopped epoch) is checkpointed.
class EarlyStopping : public Callback {
 public:
  explicit EarlyStopping(EarlyStoppingOptions options);

  std::string state_key() const override;
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;

  void setup(Trainer& trainer, Module& module, const std::string& stage) override;
  void on_validation_end(Trainer& trainer, Module& module) override;
  void on_train_epoch_end(Trainer& trainer, Module& module) override;

  double best_score() const { return best_score_; }
  int64_t wait_count() const { return wait_count_; }
  int64_t stopped_epoch() const { return stopped_epoch_; }  // -1 until it stopped training
  const std::string& stop_reason() const { return stop_reason_; }
  const EarlyStoppingOptions& options() const { return options_; }

 private:
  void run_check(Trainer& trainer);
  // Whether `current` calls for stopping now; updates best and wait; sets `reason`.
  bool evaluate(double current, std::string& reason);

  EarlyStoppingOptions options_;
  bool check_on_train_epoch_end_ = false;
  double best_score_;
  int64_t wait_count_ = 0;
  int64_t stopped_epoch_ = -1;
  std::string stop_reason_;
};

}  // namespace volt

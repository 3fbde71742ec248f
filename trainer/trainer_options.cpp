#include "trainer/trainer_options.h"

#include "distributed/cluster/cluster_environment.h"
#include "precision/precision.h"

namespace volt {

std::optional<std::chrono::seconds> TrainerOptions::max_time_duration() const {
  if (max_time.empty()) return std::nullopt;
  return parse_duration(max_time, "--max-time");
}

int64_t TrainerOptions::resolved_max_epochs() const {
  if (fast_dev_run > 0) return 1;
  if (max_epochs) return *max_epochs;
  return max_steps == -1 ? 1000 : -1;
}

void TrainerOptions::validate() const {
  RunOptions::validate();
  check<ConfigurationError>(!max_epochs || *max_epochs >= -1, "--max-epochs: expected >= -1, got ",
                            max_epochs.value_or(0));
  check<ConfigurationError>(min_epochs >= 0, "--min-epochs: expected >= 0, got ", min_epochs);
  check<ConfigurationError>(!max_epochs || *max_epochs == -1 || min_epochs <= *max_epochs,
                            "--min-epochs: expected <= --max-epochs (", max_epochs.value_or(0),
                            "), got ", min_epochs);
  check<ConfigurationError>(max_steps >= -1, "--max-steps: expected -1 (no limit) or >= 0, got ",
                            max_steps);
  max_time_duration();
  check<ConfigurationError>(accumulate_grad_batches >= 1,
                            "--accumulate-grad-batches: expected >= 1, got ", accumulate_grad_batches);
  check<ConfigurationError>(!gradient_clip_val || *gradient_clip_val > 0,
                            "--gradient-clip-val: expected a value > 0 (or leave it unset), got ",
                            gradient_clip_val.value_or(0));
  check<ConfigurationError>(!val_check_interval.is_zero(),
                            "--val-check-interval: expected a positive fraction or count, got ",
                            val_check_interval.to_string(), "; use --limit-val-batches 0 to disable validation");
  check<ConfigurationError>(check_val_every_n_epoch >= 1, "--check-val-every-n-epoch: expected >= 1, got ",
                            check_val_every_n_epoch);
  check<ConfigurationError>(num_sanity_val_steps >= -1,
                            "--num-sanity-val-steps: expected -1 (all) or >= 0, got ", num_sanity_val_steps);
  check<ConfigurationError>(log_every_n_steps >= 1, "--log-every-n-steps: expected >= 1, got ",
                            log_every_n_steps);
  check<ConfigurationError>(!default_root_dir.empty(), "--default-root-dir: expected a directory, got ''");
  check<ConfigurationError>(fast_dev_run >= 0, "--fast-dev-run: expected >= 0 batches, got ", fast_dev_run);
}

}  // namespace volt

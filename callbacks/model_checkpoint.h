#pragma once
#include <chrono>
#include <map>
#include <optional>
#include <string>

#include "callbacks/callback.h"
#include "callbacks/monitor.h"
#include "core/option_schema.h"

namespace volt {

struct ModelCheckpointOptions {
  std::string dirpath;                       // "": <trainer.log_dir()>/checkpoints (see Trainer::log_dir)
  std::string filename;                      // template, "": "{epoch}-{step}" (→ epoch=2-step=100.ckpt)
  std::string monitor;                       // metric that ranks checkpoints; "": the latest is the best
  MonitorMode mode = MonitorMode::Min;
  int64_t save_top_k = 1;                    // keep the k best; 0: none (save_last still writes); -1: all
  bool save_last = false;                    // also write last.ckpt at every save
  bool save_weights_only = false;            // the module's weights only, not the training state
  bool auto_insert_metric_name = true;       // "{epoch}" → "epoch=2"
  int64_t every_n_train_steps = 0;           // save every n optimizer steps; 0: off
  std::optional<int64_t> every_n_epochs;     // save every n epochs; 0: off; unset: 1 unless another trigger is set
  std::optional<std::chrono::seconds> train_time_interval;  // save when this much training time passed
  // Save at the end of the training epoch (true) or after validation (false); unset: at the epoch
  // end when validation runs once per epoch or not at all, after validation otherwise (Lightning).
  std::optional<bool> save_on_train_epoch_end;
  bool verbose = false;                      // print what is saved and removed (rank 0)
  // Write in the background (key "async"): the step goes on while a thread writes a snapshot;
  // at most one write in flight (Note [Checkpoints written in the background]).
  bool async_write = false;

  static const OptionSchema<ModelCheckpointOptions>& schema();
  // Each key's requirement, then those across keys (one trigger at most; save_top_k > 1 needs a
  // monitor); throws ConfigurationError naming the options.
  void validate() const;
};

// Saves checkpoints during fit, Lightning's ModelCheckpoint: at its trigger (every n epochs, every
// n optimizer steps, or every time interval) it writes <dirpath>/<filename>.ckpt through
// Trainer::save_checkpoint, keeps the `save_top_k` best by `monitor` (removing the one that falls
// out through Trainer::remove_checkpoint), and optionally last.ckpt. A NaN score ranks worst. A
// name that already exists on disk gets "-v1", "-v2"... Its state (best paths and scores) is part
// of every checkpoint, so a fit resumed into the same dirpath keeps ranking against the earlier
// files. Decisions are rank 0's, broadcast through the strategy; monitored metrics should be
// logged with sync_dist so that every rank formats the same file name.
class ModelCheckpoint : public Callback {
 public:
  CallbackRole role() const override { return CallbackRole::Checkpoint; }
  explicit ModelCheckpoint(ModelCheckpointOptions options = {});

  std::string state_key() const override;
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;

  void setup(Trainer& trainer, Module& module, const std::string& stage) override;
  void on_train_start(Trainer& trainer, Module& module) override;
  void on_train_batch_end(Trainer& trainer, Module& module, const torch::Tensor& loss, const Batch& batch,
                          int64_t batch_idx) override;
  void on_train_epoch_end(Trainer& trainer, Module& module) override;
  void on_validation_end(Trainer& trainer, Module& module) override;

  const std::string& dirpath() const { return dirpath_; }
  const std::string& best_model_path() const { return best_model_path_; }
  // The score of best_model_path (NaN when there is none or it was NaN).
  double best_model_score() const;
  const std::string& last_model_path() const { return last_model_path_; }
  // Path → score of the checkpoints kept for ranking.
  const std::map<std::string, double>& best_k_models() const { return best_k_models_; }
  const ModelCheckpointOptions& options() const { return options_; }

 private:
  bool should_skip(const Trainer& trainer) const;
  bool saves_on_train_epoch_end(const Trainer& trainer) const;
  void save_at_epoch_end(Trainer& trainer);
  void save_checkpoints(Trainer& trainer);
  void save_top_k(Trainer& trainer, const std::map<std::string, double>& candidates);
  void save_last(Trainer& trainer, const std::map<std::string, double>& candidates);
  std::map<std::string, double> monitor_candidates(const Trainer& trainer) const;
  // <dirpath>/<name>.ckpt, with "-vN" added while that exists (other than `replaceable`).
  std::string unique_path(Trainer& trainer, const std::string& name, const std::string& replaceable) const;
  void write(Trainer& trainer, const std::string& path);
  // Note [What ModelCheckpoint deletes].
  bool may_remove(const Trainer& trainer, const std::string& path) const;
  void remove(Trainer& trainer, const std::string& path);
  void update_kth_and_best();

  ModelCheckpointOptions options_;
  int64_t every_n_epochs_ = 1;
  std::string dirpath_;
  std::map<std::string, double> best_k_models_;
  std::string kth_best_model_path_;
  std::string best_model_path_;
  std::string last_model_path_;
  int64_t last_global_step_saved_ = -1;
  std::chrono::steady_clock::time_point last_time_saved_;
  bool validation_ran_ = false;  // a validation finished during this fit (a missing monitor is then an error)
  bool warned_missing_monitor_ = false;
};

}  // namespace volt

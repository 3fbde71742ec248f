#include "callbacks/model_checkpoint.h"

#include <cmath>
#include <filesystem>
#include <iostream>
#include <limits>

#include "callbacks/checkpoint_filename.h"
#include "core/duration.h"
#include "core/error.h"
#include "trainer/trainer.h"
#include "strategies/strategy.h"

namespace volt {
namespace {

constexpr const char* kExtension = ".ckpt";

}  // namespace

const OptionSchema<ModelCheckpointOptions>& ModelCheckpointOptions::schema() {
  using O = ModelCheckpointOptions;
  static const auto schema =
      OptionSchema<O>("ModelCheckpoint")
          .option("dirpath", &O::dirpath, "directory; '': <log dir>/checkpoints")
          .option("filename", &O::filename, "template such as {epoch}-{step}-{val_acc:.3f}; '': {epoch}-{step}",
                  satisfies([](const std::string& name) { return name.find('/') == std::string::npos; },
                            "a file name without '/' (directories go in dirpath)"))
          .option("monitor", &O::monitor, "metric that ranks checkpoints; '': the latest is kept")
          .choice("mode", &O::mode, monitor_modes(), "which direction is better")
          .option("save_top_k", &O::save_top_k, "keep the k best; 0: none; -1: all", at_least(-1))
          .option("save_last", &O::save_last, "also write last.ckpt at every save")
          .option("save_weights_only", &O::save_weights_only, "the model's weights only")
          .option("auto_insert_metric_name", &O::auto_insert_metric_name, "{epoch} becomes epoch=2")
          .option("every_n_train_steps", &O::every_n_train_steps, "save every n optimizer steps (0: off)", at_least(0))
          .option("every_n_epochs", &O::every_n_epochs, "save every n epochs (0: off; unset: 1 unless another trigger)",
                  at_least(0))
          .option("train_time_interval", &O::train_time_interval, duration_form(),
                  "save every so much training time (unset: off)",
                  satisfies([](std::chrono::seconds d) { return d.count() > 0; }, "a positive duration"))
          .option("save_on_train_epoch_end", &O::save_on_train_epoch_end,
                  "save at the training epoch's end (true) or after validation (false); unset: Lightning's rule")
          .option("verbose", &O::verbose, "print every save and removal")
          .option("async", &O::async_write,
                  "write in the background: a snapshot now, the file by a thread; the next save waits for it");
  return schema;
}

void ModelCheckpointOptions::validate() const {
  schema().validate(*this);
  check<ConfigurationError>(!monitor.empty() || save_top_k == -1 || save_top_k == 0 || save_top_k == 1,
                            "ModelCheckpoint: save_top_k=", save_top_k,
                            " needs a metric to rank by; set monitor (e.g. monitor=val_loss) or use save_top_k "
                            "1 (the latest), -1 (all) or 0");
  const int triggers = (every_n_train_steps > 0) + (every_n_epochs.value_or(0) > 0) + train_time_interval.has_value();
  check<ConfigurationError>(triggers <= 1,
                            "ModelCheckpoint: every_n_train_steps, every_n_epochs and train_time_interval are "
                            "mutually exclusive; set one of them");
}

ModelCheckpoint::ModelCheckpoint(ModelCheckpointOptions options) : options_(std::move(options)) {
  options_.validate();
  if (options_.filename.empty()) options_.filename = "{epoch}-{step}";
  const bool other_trigger = options_.every_n_train_steps > 0 || options_.train_time_interval.has_value();
  every_n_epochs_ = options_.every_n_epochs.value_or(other_trigger ? 0 : 1);
  format_checkpoint_name(options_.filename, {}, 0, 0, options_.auto_insert_metric_name);  // template errors now
}

std::string ModelCheckpoint::state_key() const {
  std::string key = "ModelCheckpoint{monitor=" + options_.monitor + ",mode=" + to_string(options_.mode) +
                    ",every_n_train_steps=" + std::to_string(options_.every_n_train_steps) +
                    ",every_n_epochs=" + std::to_string(every_n_epochs_) + ",train_time_interval=" +
                    std::to_string(options_.train_time_interval ? options_.train_time_interval->count() : 0);
  return key + "}";
}

double ModelCheckpoint::best_model_score() const {
  auto found = best_k_models_.find(best_model_path_);
  return found == best_k_models_.end() ? std::numeric_limits<double>::quiet_NaN() : found->second;
}

StateDict ModelCheckpoint::state_dict() const {
  StateDict best_k;
  for (const auto& [path, score] : best_k_models_) best_k.set(path, score);
  StateDict state;
  state.set("monitor", options_.monitor);
  state.set("dirpath", dirpath_);
  state.set("best_model_path", best_model_path_);
  state.set("best_model_score", best_model_score());
  state.set("kth_best_model_path", kth_best_model_path_);
  state.set("last_model_path", last_model_path_);
  state.set("best_k_models", best_k);
  return state;
}

void ModelCheckpoint::load_state_dict(const StateDict& state) {
  best_model_path_ = state.at("best_model_path").toStringRef();
  const std::string saved_dirpath = state.at("dirpath").toStringRef();
  if (saved_dirpath != dirpath_) {
    // The files ranked before live elsewhere: start ranking afresh here, keep best_model_path.
    std::cerr << "ModelCheckpoint: dirpath changed from '" << saved_dirpath << "' to '" << dirpath_
              << "'; only best_model_path is restored, ranking starts afresh\n";
    return;
  }
  best_k_models_.clear();
  const StateDict best_k = state.child("best_k_models");
  for (const auto& path : best_k.keys()) best_k_models_[path] = best_k.at(path).toDouble();
  kth_best_model_path_ = state.at("kth_best_model_path").toStringRef();
  last_model_path_ = state.at("last_model_path").toStringRef();
}

void ModelCheckpoint::setup(Trainer& trainer, Module&, const std::string&) {
  if (trainer.fn() != TrainerFn::Fitting) return;
  dirpath_ = !options_.dirpath.empty() ? options_.dirpath : trainer.checkpoint_dir().string();
}

void ModelCheckpoint::on_train_start(Trainer&, Module&) { last_time_saved_ = std::chrono::steady_clock::now(); }

bool ModelCheckpoint::should_skip(const Trainer& trainer) const {
  return trainer.options().fast_dev_run > 0 || trainer.fn() != TrainerFn::Fitting || trainer.sanity_checking() ||
         last_global_step_saved_ == trainer.global_step();
}

bool ModelCheckpoint::saves_on_train_epoch_end(const Trainer& trainer) const {
  if (options_.save_on_train_epoch_end) return *options_.save_on_train_epoch_end;
  const auto& o = trainer.options();
  // Validation once per epoch runs before the epoch ends, so its metrics are there; validation
  // more often (or every few epochs) saves after each validation instead.
  return !trainer.fit_validates() || (o.check_val_every_n_epoch == 1 && o.val_check_interval.is_fraction() &&
                                      o.val_check_interval.fraction_value() == 1.0);
}

void ModelCheckpoint::on_train_batch_end(Trainer& trainer, Module&, const torch::Tensor&, const Batch&, int64_t) {
  if (should_skip(trainer)) return;
  const int64_t step = trainer.global_step();
  bool due = options_.every_n_train_steps > 0 && step > 0 && step % options_.every_n_train_steps == 0;
  if (options_.train_time_interval) {
    const auto elapsed = std::chrono::steady_clock::now() - last_time_saved_;
    // Rank 0's clock decides, so that every rank saves at the same step.
    due |= trainer.collectives().broadcast_decision(elapsed >= *options_.train_time_interval);
  }
  if (due) save_checkpoints(trainer);
}

void ModelCheckpoint::on_train_epoch_end(Trainer& trainer, Module&) {
  if (!should_skip(trainer) && saves_on_train_epoch_end(trainer)) save_at_epoch_end(trainer);
}

void ModelCheckpoint::on_validation_end(Trainer& trainer, Module&) {
  if (trainer.sanity_checking() || trainer.fn() != TrainerFn::Fitting) return;
  validation_ran_ = true;
  if (!should_skip(trainer) && !saves_on_train_epoch_end(trainer)) save_at_epoch_end(trainer);
}

void ModelCheckpoint::save_at_epoch_end(Trainer& trainer) {
  if (every_n_epochs_ >= 1 && (trainer.current_epoch() + 1) % every_n_epochs_ == 0) save_checkpoints(trainer);
}

std::map<std::string, double> ModelCheckpoint::monitor_candidates(const Trainer& trainer) const {
  auto candidates = trainer.callback_metrics();
  candidates.emplace("epoch", static_cast<double>(trainer.current_epoch()));
  candidates["step"] = static_cast<double>(trainer.global_step());
  return candidates;
}

void ModelCheckpoint::save_checkpoints(Trainer& trainer) {
  const auto candidates = monitor_candidates(trainer);
  save_top_k(trainer, candidates);
  save_last(trainer, candidates);
  last_global_step_saved_ = trainer.global_step();
  last_time_saved_ = std::chrono::steady_clock::now();
}

std::string ModelCheckpoint::unique_path(Trainer& trainer, const std::string& name,
                                         const std::string& replaceable) const {
  const auto dir = std::filesystem::path(dirpath_);
  std::string path = (dir / (name + kExtension)).string();
  // Rank 0 looks at the disk for everyone: every rank must pick the same name.
  for (int64_t version = 1;
       trainer.collectives().broadcast_decision(path != replaceable && std::filesystem::exists(path)); ++version) {
    path = (dir / (name + "-v" + std::to_string(version) + kExtension)).string();
  }
  return path;
}

void ModelCheckpoint::write(Trainer& trainer, const std::string& path) {
  trainer.save_checkpoint(path, options_.save_weights_only, options_.async_write);  // creates dirpath as needed
  if (options_.verbose && trainer.is_global_zero()) {
    std::cout << "ModelCheckpoint: saved " << path << " (epoch " << trainer.current_epoch() << ", step "
              << trainer.global_step() << ")" << std::endl;
  }
}

// Note [What ModelCheckpoint deletes]: only a checkpoint in its current dirpath, and never the one
// this fit resumed from (Lightning's rule). A resumed run ranks afresh when its dirpath differs
// from the original run's (a new version directory) but keeps best_model_path, which points into
// the original run's directory: replacing that "best" must not delete the original run's files.
bool ModelCheckpoint::may_remove(const Trainer& trainer, const std::string& path) const {
  namespace fs = std::filesystem;
  std::error_code error;
  const auto file = fs::weakly_canonical(path, error);
  if (error || file.parent_path() != fs::weakly_canonical(dirpath_, error) || error) return false;
  return trainer.resumed_from().empty() || fs::weakly_canonical(trainer.resumed_from(), error) != file;
}

void ModelCheckpoint::remove(Trainer& trainer, const std::string& path) {
  // Rank 0 looks at the disk for everyone, as for names: the removal is a collective, and a rank
  // deciding alone could skip it (weakly_canonical fails for a file that rank 0 removes between
  // its checks), after which every collective of the run pairs with the wrong one.
  if (!trainer.collectives().broadcast_decision(may_remove(trainer, path))) {
    if (options_.verbose && trainer.is_global_zero()) {
      std::cout << "ModelCheckpoint: kept " << path << " (outside " << dirpath_
                << ", or the checkpoint this fit resumed from)" << std::endl;
    }
    return;
  }
  trainer.remove_checkpoint(path);
  if (options_.verbose && trainer.is_global_zero()) std::cout << "ModelCheckpoint: removed " << path << std::endl;
}

void ModelCheckpoint::update_kth_and_best() {
  // kth: the worst kept checkpoint (the next to drop); best: the best one. NaN ranks worst.
  kth_best_model_path_.clear();
  best_model_path_.clear();
  for (const auto& [path, score] : best_k_models_) {
    if (kth_best_model_path_.empty() || is_better(best_k_models_.at(kth_best_model_path_), score, options_.mode)) {
      kth_best_model_path_ = path;
    }
    if (best_model_path_.empty() || is_better(score, best_k_models_.at(best_model_path_), options_.mode)) {
      best_model_path_ = path;
    }
  }
}

void ModelCheckpoint::save_top_k(Trainer& trainer, const std::map<std::string, double>& candidates) {
  if (options_.save_top_k == 0) return;
  const std::string name = format_checkpoint_name(options_.filename, candidates, trainer.current_epoch(),
                                                  trainer.global_step(), options_.auto_insert_metric_name);
  if (options_.monitor.empty()) {
    // No ranking: the newest checkpoint is the best; with save_top_k 1 it replaces the previous.
    const std::string previous = best_model_path_;
    const std::string path = unique_path(trainer, name, options_.save_top_k == 1 ? previous : "");
    best_model_path_ = path;
    write(trainer, path);
    if (options_.save_top_k == 1 && !previous.empty() && previous != path) remove(trainer, previous);
    return;
  }
  auto found = candidates.find(options_.monitor);
  if (found == candidates.end()) {
    check<ConfigurationError>(!validation_ran_, "ModelCheckpoint: the monitored metric '", options_.monitor,
                              "' was not logged; available: ", available_metrics(trainer),
                              ". Log it (module.log) or monitor one of these");
    if (!warned_missing_monitor_ && trainer.is_global_zero()) {
      std::cerr << "ModelCheckpoint: '" << options_.monitor << "' is not logged yet (available: "
                << available_metrics(trainer) << "); no top-k checkpoint until it is\n";
    }
    warned_missing_monitor_ = true;
    return;
  }
  const double current = found->second;
  const int64_t k = options_.save_top_k;
  bool better = k == -1 || static_cast<int64_t>(best_k_models_.size()) < k ||
                is_better(current, best_k_models_.at(kth_best_model_path_), options_.mode);
  better = trainer.collectives().broadcast_decision(better);
  if (!better) {
    if (options_.verbose && trainer.is_global_zero()) {
      std::cout << "ModelCheckpoint: " << options_.monitor << " = " << current << " is not in the top " << k
                << std::endl;
    }
    return;
  }
  std::string dropped;
  if (k > 0 && static_cast<int64_t>(best_k_models_.size()) == k) {
    dropped = kth_best_model_path_;
    best_k_models_.erase(dropped);
  }
  const std::string path = unique_path(trainer, name, dropped);
  best_k_models_[path] = current;
  update_kth_and_best();
  write(trainer, path);
  if (!dropped.empty() && dropped != path) remove(trainer, dropped);
}

void ModelCheckpoint::save_last(Trainer& trainer, const std::map<std::string, double>& candidates) {
  if (!options_.save_last) return;
  const std::string name =
      format_checkpoint_name("last", candidates, trainer.current_epoch(), trainer.global_step(), false);
  const std::string previous = last_model_path_;
  const std::string path = unique_path(trainer, name, previous);
  last_model_path_ = path;
  write(trainer, path);
  if (!previous.empty() && previous != path) remove(trainer, previous);
}

}  // namespace volt

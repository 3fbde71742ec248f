#include "trainer/training_state.h"

#include "trainer/loops/epoch_remainder.h"
#include "trainer/trainer.h"

namespace volt {

StateDict fit_progress_state(const FitProgress& progress) {
  StateDict state;
  state.set("epoch", progress.epoch);
  state.set("global_step", progress.global_step);
  state.set("next_batch", progress.next_batch);
  state.set("window_micro_batches", progress.window_micro_batches);
  state.set("window_has_backward", progress.window_has_backward);
  state.set("validation_checked", progress.validation_checked);
  state.set("epoch_end_started", progress.epoch_end_started);
  return state;
}

FitProgress fit_progress_from(const StateDict& state) {
  FitProgress progress;
  progress.epoch = state.get_int("epoch");
  progress.global_step = state.get_int("global_step");
  progress.next_batch = state.get_int("next_batch");
  progress.window_micro_batches = state.get_int("window_micro_batches");
  progress.window_has_backward = state.get_bool("window_has_backward");
  progress.validation_checked = state.get_bool("validation_checked");
  progress.epoch_end_started = state.get_bool("epoch_end_started");
  check<CheckpointError>(progress.epoch >= 0 && progress.global_step >= 0 && progress.next_batch >= 0 &&
                             progress.window_micro_batches >= 0,
                         "checkpoint: the fit loop's progress has a negative counter (epoch ", progress.epoch,
                         ", global_step ", progress.global_step, ", next_batch ", progress.next_batch,
                         "); the checkpoint is damaged");
  return progress;
}

StateDict train_data_state(const DataLoader& loader, int64_t world_size, int64_t data_replicas) {
  const auto& options = loader.options();
  StateDict state;
  state.set("dataset_size", loader.dataset().size());
  state.set("batch_size", options.batch_size);
  state.set("shuffle", options.shuffle);
  state.set("seed", static_cast<int64_t>(loader.seed()));
  state.set("drop_last", options.drop_last);
  state.set("world_size", world_size);
  state.set("data_replicas", data_replicas);
  state.set("samples", loader.sampler().size());
  state.set("global_order", deals_the_global_order(loader));
  return state;
}

int64_t saved_data_replicas(const StateDict& train_data) {
  return train_data.contains("data_replicas") ? train_data.get_int("data_replicas") : train_data.get_int("world_size");
}

std::vector<std::string> train_data_differences(const StateDict& saved, const StateDict& current) {
  std::vector<std::string> out;
  for (const auto& key : current.keys()) {
    const std::string now =
        current.at(key).isBool() ? (current.get_bool(key) ? "true" : "false") : std::to_string(current.get_int(key));
    if (!saved.contains(key)) continue;
    const auto value = saved.at(key);
    const std::string before = value.isBool()  ? (value.toBool() ? "true" : "false")
                               : value.isInt() ? std::to_string(value.toInt())
                                               : std::string("?");
    if (before != now) out.push_back(key + ": " + before + " -> " + now);
  }
  return out;
}

}  // namespace volt

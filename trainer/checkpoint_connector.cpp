#include "trainer/checkpoint_connector.h"

#include "run/optim/fused_adamw.h"

#include <set>

#include "checkpoint/checkpoint_format.h"
#include "checkpoint/per_rank_entries.h"
#include "checkpoint/rng_state.h"
#include "core/warning.h"
#include "run/checkpoint_header.h"
#include "strategies/loaded_checkpoint.h"
#include "strategies/rank_gather.h"
#include "strategies/strategy.h"
#include "trainer/loops/epoch_remainder.h"
#include "trainer/loops/loop_state.h"
#include "trainer/trainer.h"
#include "trainer/training_state.h"

namespace volt {
namespace {

// Warnings go to stderr once (global rank 0): they report a resumed run that cannot be exactly
// the original, which is allowed (the user changed a setting) but must not pass unnoticed.
void warn(const Trainer& trainer, const std::string& message) {
  if (trainer.is_global_zero()) volt::warn(message);
}

c10::IValue to_ivalue(const HyperparameterValue& value) {
  return std::visit([](const auto& v) -> c10::IValue { return c10::IValue(v); }, value);
}

}  // namespace

StateDict CheckpointConnector::dump(bool weights_only) {
  Trainer& t = trainer_;
  check<ConfigurationError>(state_.module != nullptr,
                            "Trainer::save_checkpoint: no model is attached; call it during "
                            "or after fit, validate, test or predict");
  Module& module = *state_.module;
  const auto layout = strategy_.checkpointing().layout();
  const auto topology = strategy_.topology();

  StateDict checkpoint = checkpoint_header(strategy_, layout);
  checkpoint.set("weights_only", weights_only);
  checkpoint.set("epoch", state_.progress.epoch);
  checkpoint.set("global_step", state_.progress.global_step);
  checkpoint.set("state_dict", strategy_.checkpointing().model_state_dict(module, layout));
  StateDict hparams;
  for (const auto& [name, value] : module.hparams()) hparams.set(name, to_ivalue(value));
  checkpoint.set("hyper_parameters", hparams);
  StateDict strategy_section;
  strategy_section.set("name", strategy_.name());
  strategy_section.set("world_size", topology.world_size);
  if (!weights_only) strategy_section.set("state", strategy_.checkpointing().strategy_state_dict(layout));
  checkpoint.set("strategy", strategy_section);
  if (layout == CheckpointLayout::Sharded) {
    checkpoint.set("shard_index", strategy_.checkpointing().shard_index(weights_only ? decltype(state_.optimizers){}
                                                                                     : state_.optimizers));
  }

  if (!weights_only) {
    c10::impl::GenericList optimizers(c10::AnyType::get());
    for (auto& optimizer : state_.optimizers) prepare_optimizer_state_for_save(*optimizer);
    for (auto& optimizer : state_.optimizers)
      optimizers.push_back(strategy_.checkpointing().optimizer_state_dict(*optimizer, layout).to_ivalue());
    checkpoint.set("optimizer_states", optimizers);
    c10::impl::GenericList schedulers(c10::AnyType::get());
    for (const auto& config : state_.schedulers) schedulers.push_back(config.scheduler->state_dict().to_ivalue());
    checkpoint.set("lr_schedulers", schedulers);
    StateDict precision;
    precision.set("name", t.precision().name());
    precision.set("state", t.precision().state_dict());
    checkpoint.set("precision", precision);
    StateDict loops;
    loops.set("fit_loop", dump_fit_loop());
    checkpoint.set("loops", loops);

    StateDict callbacks;
    std::set<std::string> keys;
    for (const auto& callback : t.callbacks()) {
      const StateDict state = callback->state_dict();
      if (state.empty()) continue;
      const std::string key = callback->state_key();
      check<ConfigurationError>(keys.insert(key).second, "Trainer::save_checkpoint: two callbacks have the state key '",
                                key,
                                "'; give them different settings or override state_key() so that each "
                                "callback's state can be restored into it");
      callbacks.set(key, state);
    }
    checkpoint.set("callbacks", callbacks);
    c10::impl::GenericList loggers(c10::AnyType::get());
    for (const auto& logger : t.loggers()) {
      StateDict entry;
      entry.set("name", logger->name());
      entry.set("version", logger->version());
      entry.set("log_dir", logger->log_dir());
      loggers.push_back(entry.to_ivalue());
    }
    checkpoint.set("loggers", loggers);
    checkpoint.set("rng_states", rng_state_dict());
    if (topology.world_size > 1 && layout == CheckpointLayout::Full) {
      checkpoint.set("rng_states_per_rank", gather_rng_states());
    }
    for (auto& callback : t.callbacks()) callback->on_save_checkpoint(t, module, checkpoint);
  }
  module.on_save_checkpoint(checkpoint);
  return checkpoint;
}

StateDict CheckpointConnector::dump_fit_loop() {
  Trainer& t = trainer_;
  const auto& p = state_.progress;
  StateDict fit_loop = fit_progress_state(p);
  // The factor in use (a GradientAccumulationScheduler may have changed it this epoch), and the
  // option, so that a resume can tell a changed option from a scheduled factor.
  fit_loop.set("accumulate_grad_batches", state_.accumulate_grad_batches);
  fit_loop.set("accumulate_grad_batches_option", t.options().accumulate_grad_batches);
  fit_loop.set("num_training_batches", state_.num_training_batches);
  if (state_.train_loader) {
    // The epoch is dealt in one share per data-parallel replica, not per rank: a pipeline's stages
    // and a tensor-parallel group draw one share together.
    fit_loop.set("train_data", current_train_data());
    fit_loop.set("epoch_samples_consumed",
                 epoch_samples_consumed(*state_.train_loader, strategy_.placement().data_replica().count, p.epoch,
                                        p.next_batch, state_.epoch_remainder));
  }
  // What has been logged: the open epoch's aggregates, and the values callbacks monitor.
  if (state_.train_collector.stage() == RunningStage::Training)
    fit_loop.set("train_metrics", state_.train_collector.state_dict());
  StateDict callback_metrics;
  for (const auto& [name, value] : state_.callback_metrics.values()) callback_metrics.set(name, value);
  fit_loop.set("callback_metrics", callback_metrics);
  // Inside an accumulation window the gradients accumulated so far are part of the state: the
  // step at the window's end needs them. The strategy knows where they live.
  if (p.window_micro_batches > 0 && p.window_has_backward) {
    const StateDict section =
        strategy_.checkpointing().accumulated_gradients(*state_.module, strategy_.checkpointing().layout());
    for (const auto& key : section.keys()) fit_loop.set(key, section.at(key));
  }
  return fit_loop;
}

void CheckpointConnector::restore(const LoadedCheckpoint& loaded, const std::string& source) {
  const StateDict& checkpoint = loaded.state;
  check_checkpoint_readable(checkpoint, strategy_, source);
  state_.module->on_load_checkpoint(checkpoint);
  restore_model(checkpoint, loaded.slices.get(), source);
  if (state_.fn != TrainerFn::Fitting) return;
  check<CheckpointError>(!checkpoint.contains("weights_only") || !checkpoint.get_bool("weights_only"), source,
                         " holds the model's weights only (saved with weights_only), so training cannot resume "
                         "from it; resume from a full checkpoint, or load the weights with load_weights and "
                         "start a new fit");
  check<CheckpointError>(checkpoint.contains("loops") && checkpoint.contains("optimizer_states"), source,
                         " holds no training state ('loops', 'optimizer_states'), so training cannot resume from "
                         "it; it was not written by Trainer::save_checkpoint");
  restore_callbacks(checkpoint);
  restore_training_state(checkpoint, loaded.slices.get(), source);
}

void CheckpointConnector::restore_model(const StateDict& checkpoint, const ShardedCheckpoint* slices,
                                        const std::string& source) {
  strategy_.checkpointing().load_model_state_dict(*state_.module, checkpoint.child("state_dict"),
                                                  checkpoint_layout_of(checkpoint), /*strict=*/true, source, slices);
}

void CheckpointConnector::restore_callbacks(const StateDict& checkpoint) {
  Trainer& t = trainer_;
  const StateDict states = checkpoint.contains("callbacks") ? checkpoint.child("callbacks") : StateDict();
  std::set<std::string> restored;
  for (auto& callback : t.callbacks()) {
    callback->on_load_checkpoint(t, *state_.module, checkpoint);
    const std::string key = callback->state_key();
    if (states.contains(key)) {
      callback->load_state_dict(states.child(key));
      restored.insert(key);
    }
  }
  std::string unmatched;
  for (const auto& key : states.keys()) {
    if (!restored.count(key)) unmatched += (unmatched.empty() ? "" : ", ") + key;
  }
  if (!unmatched.empty()) {
    warn(t, "the checkpoint holds state of callbacks this Trainer does not have (" + unmatched +
                "); their state is not restored. Add the same callbacks, with the same settings, to resume them");
  }
}

void CheckpointConnector::restore_training_state(const StateDict& checkpoint, const ShardedCheckpoint* slices,
                                                 const std::string& source) {
  Trainer& t = trainer_;
  const auto layout = checkpoint_layout_of(checkpoint);

  const auto precision = checkpoint.child("precision");
  if (precision.get_string("name") == t.precision().name()) {
    t.precision().load_state_dict(precision.child("state"));
  } else if (!precision.child("state").empty()) {
    warn(t, source + " was written with precision '" + precision.get_string("name") + "', this run uses '" +
                t.precision().name() + "': the precision's state (e.g. the GradScaler's scale) is not restored");
  }

  const auto optimizers = checkpoint.at("optimizer_states");
  check<CheckpointError>(optimizers.isList() && optimizers.toListRef().size() == state_.optimizers.size(), source,
                         " holds the state of ", optimizers.isList() ? optimizers.toListRef().size() : 0,
                         " optimizers, configure_optimizers returned ", state_.optimizers.size(),
                         "; it must build the same optimizers as the run that wrote the checkpoint");
  const ParameterNamer name_of = parameter_namer(*state_.module);
  for (size_t i = 0; i < state_.optimizers.size(); ++i) {
    strategy_.checkpointing().load_optimizer_state_dict(
        *state_.optimizers[i],
        StateDict::from_ivalue(optimizers.toListRef()[i], source + " optimizer " + std::to_string(i)), layout,
        source + ", optimizer " + std::to_string(i), name_of, slices);
  }
  const auto schedulers = checkpoint.at("lr_schedulers");
  check<CheckpointError>(schedulers.isList() && schedulers.toListRef().size() == state_.schedulers.size(), source,
                         " holds the state of ", schedulers.isList() ? schedulers.toListRef().size() : 0,
                         " LR schedulers, configure_optimizers returned ", state_.schedulers.size(),
                         "; it must build the same schedulers as the run that wrote the checkpoint");
  for (size_t i = 0; i < state_.schedulers.size(); ++i) {
    state_.schedulers[i].scheduler->load_state_dict(
        StateDict::from_ivalue(schedulers.toListRef()[i], source + " LR scheduler " + std::to_string(i)));
  }

  restore_fit_loop(checkpoint.child("loops").child("fit_loop"), source);

  const auto strategy_section = checkpoint.child("strategy");
  const auto strategy_state = strategy_section.contains("state") ? strategy_section.child("state") : StateDict();
  if (strategy_section.get_string("name") == strategy_.name()) {
    strategy_.checkpointing().load_strategy_state_dict(strategy_state, layout);
  } else if (!strategy_state.empty()) {
    warn(t, source + " was written by strategy '" + strategy_section.get_string("name") + "', this run uses '" +
                strategy_.name() + "': that strategy's own state is not restored");
  }
  state_.pending_rng_state = rng_state_for_this_rank(checkpoint, source);
}

c10::IValue CheckpointConnector::gather_rng_states() {
  // The CPU generator's state and, on CUDA, that of this rank's device: what a rank's random
  // numbers come from (ranks may be seeded differently).
  const auto device = strategy_.root_device();
  const auto cpu = gather_from_ranks(strategy_.collectives(), rng_state_dict().get_tensor("torch"));
  std::vector<torch::Tensor> cuda;
  if (device.is_cuda()) {
    cuda = gather_from_ranks(strategy_.collectives(), at::globalContext().defaultGenerator(device).get_state());
  }
  std::vector<StateDict> per_rank(cpu.size());
  for (size_t r = 0; r < cpu.size(); ++r) {
    per_rank[r].set("torch", cpu[r]);
    if (!cuda.empty()) per_rank[r].set("torch.cuda.device", cuda[r]);
  }
  return state_dict_list(per_rank);
}

StateDict CheckpointConnector::rng_state_for_this_rank(const StateDict& checkpoint, const std::string& source) {
  const auto topology = strategy_.topology();
  StateDict states = checkpoint.child("rng_states");
  if (!checkpoint.contains("rng_states_per_rank")) {
    if (topology.world_size > 1 && checkpoint_layout_of(checkpoint) == CheckpointLayout::Full) {
      warn(trainer_, source + " holds one rank's random states; every one of the " +
                         std::to_string(topology.world_size) + " ranks continues from them");
    }
    return states;
  }
  const auto found =
      per_rank_entry(checkpoint, "rng_states_per_rank", topology.global_rank, topology.world_size, source);
  if (!found.entry) {
    warn(trainer_, source + " holds the random states of " + std::to_string(found.saved_ranks) +
                       " ranks, this run has " + std::to_string(topology.world_size) +
                       ": every rank continues from rank 0's");
    return states;
  }
  const StateDict& mine = *found.entry;
  states.set("torch", mine.get_tensor("torch"));
  if (mine.contains("torch.cuda.device")) states.set("torch.cuda.device", mine.get_tensor("torch.cuda.device"));
  return states;
}

void CheckpointConnector::restore_fit_loop(const StateDict& fit_loop, const std::string& source) {
  Trainer& t = trainer_;
  const FitProgress progress = fit_progress_from(fit_loop);
  const bool mid_epoch = progress.next_batch > 0 && !progress.epoch_end_started;
  if (mid_epoch) {
    std::vector<std::string> changes;
    // The rest of the interrupted epoch runs with the factor in use when the checkpoint was
    // written (the open window, if any, closes where it would have); a changed option applies
    // from the next epoch on.
    const int64_t in_use = fit_loop.get_int("accumulate_grad_batches");
    const int64_t option_then = fit_loop.contains("accumulate_grad_batches_option")
                                    ? fit_loop.get_int("accumulate_grad_batches_option")
                                    : in_use;
    state_.accumulate_grad_batches = in_use;
    state_.accumulation_restored_for_epoch = progress.epoch;
    if (option_then != t.options().accumulate_grad_batches) {
      warn(t, source + " was written in the middle of epoch " + std::to_string(progress.epoch) +
                  " by a run with accumulate_grad_batches " + std::to_string(option_then) + ", this one has " +
                  std::to_string(t.options().accumulate_grad_batches) + ": the rest of epoch " +
                  std::to_string(progress.epoch) + " keeps the " + std::to_string(in_use) +
                  " micro-batches per step in use when it was written; the new value applies from the next epoch");
    }
    if (!continue_epoch_in_order(fit_loop, progress, source)) {
      const int64_t batches = fit_loop.get_int("num_training_batches");
      if (batches != state_.num_training_batches) {
        changes.push_back("training batches per epoch: " + std::to_string(batches) + " -> " +
                          std::to_string(state_.num_training_batches));
      }
      if (fit_loop.contains("train_data") && state_.train_loader) {
        for (auto& change : train_data_differences(fit_loop.child("train_data"), current_train_data())) {
          changes.push_back(std::move(change));
        }
      }
    }
    if (!changes.empty()) {
      std::string list;
      for (const auto& change : changes) list += (list.empty() ? "" : "; ") + change;
      warn(t, source + " was written in the middle of epoch " + std::to_string(progress.epoch) + " (before batch " +
                  std::to_string(progress.next_batch) +
                  ") by a run whose data or accumulation differs from this one (" + list +
                  "): the rest of this epoch will not see exactly the batches the original run would have");
    }
  }
  state_.progress = progress;
  if (!mid_epoch) state_.epoch_remainder.reset();
  if (mid_epoch && fit_loop.contains("train_metrics"))
    state_.train_collector.load_state_dict(fit_loop.child("train_metrics"));
  if (fit_loop.contains("callback_metrics")) {
    const auto metrics = fit_loop.child("callback_metrics");
    for (const auto& name : metrics.keys()) state_.callback_metrics.set(name, metrics.get_double(name));
  }
  // The gradients of an open accumulation window (none: the window is empty).
  strategy_.checkpointing().load_accumulated_gradients(*state_.module, fit_loop, source);
}

bool CheckpointConnector::continue_epoch_in_order(const StateDict& fit_loop, const FitProgress& progress,
                                                  const std::string& source) {
  state_.epoch_remainder.reset();
  if (!fit_loop.contains("train_data") || !state_.train_loader) return false;
  const DataLoader& loader = *state_.train_loader;
  const auto topology = strategy_.topology();
  const auto replica = strategy_.placement().data_replica();
  const StateDict saved = fit_loop.child("train_data");
  const StateDict now = current_train_data();
  // The same epoch order (dataset, shuffling, seed, drop_last), dealt by volt on both sides, over
  // whole epochs (no batch limit) on both sides: the data position carries over.
  for (const char* key : {"dataset_size", "shuffle", "seed", "drop_last"}) {
    if (!saved.contains(key) || !(saved.at(key) == now.at(key))) return false;
  }
  if (saved.contains("global_order") && !saved.get_bool("global_order")) return false;
  if (!now.get_bool("global_order")) return false;
  const int64_t saved_batch = saved.get_int("batch_size"), saved_ranks = saved.get_int("world_size");
  const int64_t saved_replicas = saved_data_replicas(saved);
  const int64_t saved_samples = saved.get_int("samples");
  const int64_t saved_whole_epoch =
      saved.get_bool("drop_last") ? saved_samples / saved_batch : (saved_samples + saved_batch - 1) / saved_batch;
  if (fit_loop.get_int("num_training_batches") != saved_whole_epoch) return false;
  if (state_.num_training_batches != loader.num_batches()) return false;

  const int64_t dataset_size = saved.get_int("dataset_size");
  const int64_t consumed = fit_loop.contains("epoch_samples_consumed")
                               ? fit_loop.get_int("epoch_samples_consumed")
                               : std::min(progress.next_batch * saved_batch * saved_replicas, dataset_size);
  check<CheckpointError>(consumed >= 0 && consumed <= dataset_size, source, ": the fit loop has consumed ", consumed,
                         " samples of an epoch of ", dataset_size, "; the checkpoint is damaged");
  state_.epoch_remainder =
      epoch_remainder(loader, replica.count, replica.index, progress.epoch, progress.next_batch, consumed);
  if (state_.epoch_remainder) {
    const int64_t batch = loader.options().batch_size;
    // "2 ranks with batch 4 (8 samples per step)"; where ranks share batches, their replicas too.
    const auto per_step = [](int64_t ranks, int64_t replicas, int64_t b) {
      const auto count = [](int64_t n, const char* what) {
        return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
      };
      return count(ranks, "rank") + (replicas == ranks ? "" : " in " + count(replicas, "data replica")) +
             " with batch " + std::to_string(b) + " (" + std::to_string(replicas * b) + " samples per step)";
    };
    const std::string then = per_step(saved_ranks, saved_replicas, saved_batch);
    const std::string now_per_step = per_step(topology.world_size, replica.count, batch);
    if (consumed >= dataset_size) {
      // Written after the epoch's last batch, before its end hooks ran: nothing of it is left.
      warn(trainer_, source + " was written at the end of epoch " + std::to_string(progress.epoch) +
                         ", after its last "
                         "batch (all " +
                         std::to_string(dataset_size) + " of its samples consumed), by " + then + "; this run has " +
                         now_per_step + ": epoch " + std::to_string(progress.epoch) +
                         " ends here, and the next epoch is a whole one "
                         "at this run's global batch size");
      return true;
    }
    warn(trainer_, source + " was written in the middle of epoch " + std::to_string(progress.epoch) + ", " +
                       std::to_string(consumed) + " of its " + std::to_string(dataset_size) + " samples in, by " +
                       then + "; this run has " + now_per_step + ": the rest of epoch " +
                       std::to_string(progress.epoch) + " continues with the " +
                       std::to_string(dataset_size - consumed) + " samples not yet consumed, in the same order, in " +
                       std::to_string(state_.epoch_remainder->loader->num_batches()) +
                       " more batches per rank; the global batch size (and so the steps per epoch) changes with it");
  }
  return true;
}

StateDict CheckpointConnector::current_train_data() const {
  return train_data_state(*state_.train_loader, strategy_.topology().world_size,
                          strategy_.placement().data_replica().count);
}

}  // namespace volt

#pragma once
// Between a Trainer and its checkpoints: builds the checkpoint dict from the trainer's loop state
// and what its strategy, precision, callbacks and loggers hold (Note [What a checkpoint holds]),
// and restores one into them.
#include <string>

#include "core/state_dict.h"
#include "trainer/loops/loop_context.h"
#include "trainer/loops/loop_state.h"

namespace volt {

struct LoadedCheckpoint;
class ShardedCheckpoint;

class Strategy;
class Trainer;

// Note [What a checkpoint holds]
// A dict with str keys (Python: torch.load(path)):
//   "volt_version", "format_version", "layout" ("full" | "sharded"), "shard" ({"rank",
//   "world_size"}, sharded only), "weights_only", "epoch", "global_step",
//   "state_dict"          the model: parameter/buffer name → tensor (PyTorch's names)
//   "hyper_parameters"    Module::hparams()
//   "strategy"            {"name", "world_size", "state": the strategy-owned section}
// and unless weights_only:
//   "optimizer_states"    [PyTorch-layout optimizer state dict per optimizer]
//   "lr_schedulers"       [scheduler state per scheduler]
//   "precision"           {"name", "state"} (the GradScaler's state for *-mixed)
//   "loops"               {"fit_loop": progress, "train_data", "train_metrics",
//                          "callback_metrics", and the strategy's accumulated_gradients():
//                          "accumulated_grads" (one process or a shard) or
//                          "accumulated_grads_per_rank" (full layout, several ranks)}
//   "callbacks"           {Callback::state_key(): Callback::state_dict()}
//   "loggers"             [{"name", "version", "log_dir"}]
//   "rng_states"          {"torch": CPU generator state, "torch.cuda": [...]} of the writing rank
//   "rng_states_per_rank" [{"torch", "torch.cuda.device"}] per rank (full layout, several ranks)
// Callbacks' and the module's on_save_checkpoint hooks may add keys of their own.
class CheckpointConnector {
 public:
  explicit CheckpointConnector(const LoopContext& context)
      : trainer_(context.trainer), strategy_(context.strategy), state_(context.state) {}

  // The checkpoint of the trainer's current state. [collective when the strategy shards]
  StateDict dump(bool weights_only);
  // Restores what the trainer's current function needs: everything for fit (random states are
  // left in LoopState::pending_rng_state for the fit loop), the model's weights otherwise.
  // `source` names the checkpoint in messages.
  void restore(const LoadedCheckpoint& loaded, const std::string& source);

 private:
  // `slices` reads the placeholders the checkpoint holds (LoadedCheckpoint::slices; null: none).
  void restore_model(const StateDict& checkpoint, const ShardedCheckpoint* slices, const std::string& source);
  void restore_training_state(const StateDict& checkpoint, const ShardedCheckpoint* slices, const std::string& source);
  void restore_callbacks(const StateDict& checkpoint);
  StateDict dump_fit_loop();
  void restore_fit_loop(const StateDict& fit_loop, const std::string& source);
  // For a checkpoint written mid-epoch: whether the rest of its epoch continues in the epoch's
  // order from the first sample not consumed (setting LoopState::epoch_remainder when that takes
  // a loader of its own, with a warning); false when the data or the batch limits changed.
  bool continue_epoch_in_order(const StateDict& fit_loop, const FitProgress& progress, const std::string& source);
  // train_data_state() of this run's training loader, dealt to the strategy's data replicas.
  StateDict current_train_data() const;
  // Every rank's random states, for a full checkpoint of several ranks. [collective]
  c10::IValue gather_rng_states();
  // The random states this rank continues from.
  StateDict rng_state_for_this_rank(const StateDict& checkpoint, const std::string& source);

  Trainer& trainer_;  // the LoopContext's, for the callbacks' hooks
  Strategy& strategy_;
  LoopState& state_;
};

}  // namespace volt

#pragma once
// The checkpoint section of a model averager (post-local-SGD's, SlowMo's), written beside the
// strategy's own section (DDPCheckpointState):
//   "model_averager"            its state (the step; SlowMo's buffers), when every rank's agrees
//                               or the layout is Sharded (each rank writes its own file);
//   "model_averager_per_rank"   every rank's, for a Full checkpoint, when it differs per rank;
//   "local_models_per_rank"     Note [Local models in a checkpoint].
//
// Note [Local models in a checkpoint]: past the warm-up, ranks hold models and optimizer states of
// their own (each subgroup stepped with its own gradients since the last average, and optimizer
// state such as momentum is never averaged). A Full checkpoint's model and optimizer sections are
// rank 0's; every rank's goes here ({"state_dict", "optimizer_states"} per rank), so that a
// resumed run continues each rank's own. (A Sharded checkpoint's files already hold each rank's
// own.) Restored at the same world size only; at another, every rank continues from rank 0's.
#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_layout.h"
#include "core/state_dict.h"
#include "strategies/averaging/model_averager.h"
#include "strategies/strategy_collectives.h"

namespace volt::averaging {

// What a rank's local phase holds: its module and its optimizers.
struct LocalModel {
  torch::nn::Module* module = nullptr;
  const std::vector<std::shared_ptr<torch::optim::Optimizer>>* optimizers = nullptr;
};

// Adds the averager's keys to `section`. [collective]
void save_averager_section(StateDict& section, ModelAverager& averager, const LocalModel& local,
                           StrategyCollectives& collectives, CheckpointLayout layout);
// Restores them (`averager` may be null: a run without one continues from rank 0's model, with a
// warning). The averager's step is restored only when `reducer_restored`: it and the comm hook's
// iteration count the same windows, so both resume or both start afresh.
void load_averager_section(const StateDict& state, ModelAverager* averager, bool reducer_restored,
                           const LocalModel& local, const StrategyCollectives& collectives, const std::string& who);

}  // namespace volt::averaging

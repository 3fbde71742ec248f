#pragma once
// The checkpoint part (checkpoint_state.h) of DDP and of the strategies built on it
// (post-local-SGD, SlowMo): the default model and optimizer sections (consolidated with
// shard_optimizer), plus the strategy's own section:
//   "reducer" (Sharded) / "reducer_per_rank" (Full): the reducer's state (iteration count,
//     rebuilt buckets, the comm hook's state such as PowerSGD's error feedback, which differs per
//     rank). Restored only at the same world size; otherwise the reducer and its hook start
//     afresh, with a warning;
//   with a model averager: its section (averaging/local_model_checkpoint.h).
#include "strategies/averaging/local_model_checkpoint.h"
#include "strategies/checkpoint_state.h"

namespace volt {

namespace ddp {
class Reducer;
}

// What DDP's checkpoint section acts on besides its PartContext (Note [Part context]): the
// reducer and the model averager its strategy builds at setup, and the local model they average.
// DDPStrategy implements it; the part reads it when it acts.
class DDPSectionContext {
 public:
  // Throws InternalError before setup_module.
  virtual ddp::Reducer& reducer() const = 0;
  // Null without one.
  virtual averaging::ModelAverager* model_averager() const = 0;
  virtual averaging::LocalModel local_model() const = 0;

 protected:
  ~DDPSectionContext() = default;
};

class DDPCheckpointState : public CheckpointState {
 public:
  DDPCheckpointState(const PartContext& context, const DDPSectionContext& section, CheckpointLayout layout);

  StateDict strategy_state_dict(CheckpointLayout layout) override;  // [collective]
  void load_strategy_state_dict(const StateDict& state, CheckpointLayout layout) override;

 private:
  const DDPSectionContext& section_;
};

}  // namespace volt

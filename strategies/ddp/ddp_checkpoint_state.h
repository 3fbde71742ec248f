#pragma once
// The checkpoint part (checkpoint_state.h) of DDP and of the strategies built on it
// (post-local-SGD, SlowMo): the default model and optimizer sections (consolidated with
// shard_optimizer), plus the strategy's own section:
//   "reducer" (Sharded) / "reducer_per_rank" (Full): the reducer's state (iteration count,
//     rebuilt buckets, the comm hook's state such as PowerSGD's error feedback, which differs per
//     rank). Restored only at the same world size; otherwise the reducer and its hook start
//     afresh, with a warning;
//   with a model averager: its section (averaging/local_model_checkpoint.h).
#include "strategies/checkpoint_state.h"

namespace volt {

class DDPStrategy;

class DDPCheckpointState : public CheckpointState {
 public:
  DDPCheckpointState(DDPStrategy& owner, CheckpointLayout layout);

  StateDict strategy_state_dict(CheckpointLayout layout) override;  // [collective]
  void load_strategy_state_dict(const StateDict& state, CheckpointLayout layout) override;

 private:
  DDPStrategy& ddp_;
};

}  // namespace volt

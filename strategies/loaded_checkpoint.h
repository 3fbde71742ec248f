#pragma once
// What a checkpoint load returns (Strategy::load_checkpoint, load_checkpoint_files).
#include <memory>

#include "core/state_dict.h"

namespace volt {

class ShardedCheckpoint;

// The checkpoint and, where it holds placeholders for the model's and optimizers' tensors, what
// reads them (Note [Reading a sharded checkpoint anywhere] in checkpoint/sharded_checkpoint.h).
// The restore passes `slices` to the checkpoint part's loads (CheckpointState); dropping the
// value closes the shard files.
struct LoadedCheckpoint {
  StateDict state;
  std::shared_ptr<const ShardedCheckpoint> slices;  // null: `state` holds every tensor
};

}  // namespace volt

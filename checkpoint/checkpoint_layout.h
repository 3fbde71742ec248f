#pragma once

namespace volt {

// Note [Checkpoint layouts]
// Full: one file, written by global rank 0, holding every parameter and the whole optimizer state
// unsharded and under PyTorch's names; any strategy at any world size can load it (a sharding
// strategy takes its shard from it). Sharded: a directory with one file per rank
// (shard_<rank>.ckpt), each holding the whole training state except that "state_dict" and
// "optimizer_states" are that rank's shard; only the same strategy at the same world size loads
// it. Either is written atomically: readers see the previous checkpoint or the complete new one
// (strategies/checkpoint_files.h).
enum class CheckpointLayout { Full, Sharded };

}  // namespace volt

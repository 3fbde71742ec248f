#pragma once
// How a checkpoint's bytes reach the disk in each layout (Note [Checkpoint layouts]): global rank
// 0 writes the Full file; every rank writes its shard of a Sharded directory, which appears whole
// or not at all. The bytes go through a CheckpointIO; the ranks agree through their collectives,
// so that when any rank fails, every rank throws.
#include <filesystem>

#include "checkpoint/checkpoint_io.h"
#include "checkpoint/checkpoint_layout.h"
#include "core/state_dict.h"
#include "strategies/strategy_collectives.h"

namespace volt {

// Writes `checkpoint` atomically in `layout`: the file `path` (Full), or this rank's shard into
// the directory `path` (Sharded). [collective]
void save_checkpoint_files(StrategyCollectives& collectives, CheckpointIO& io, CheckpointLayout layout,
                           const StateDict& checkpoint, const std::filesystem::path& path);
// This rank's view of the checkpoint at `path`: the file, or this rank's shard of a sharded
// directory. Throws CheckpointError when missing, damaged, or sharded for another world size.
StateDict load_checkpoint_files(const StrategyCollectives& collectives, CheckpointIO& io,
                                const std::filesystem::path& path);
// Global rank 0 removes the checkpoint file or directory. [collective]
void remove_checkpoint_files(StrategyCollectives& collectives, CheckpointIO& io, const std::filesystem::path& path);

}  // namespace volt

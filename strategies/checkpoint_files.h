#pragma once
// How a checkpoint's bytes reach the disk in each layout (Note [Checkpoint layouts]): global rank
// 0 writes the Full file; every rank writes its shard of a Sharded directory, which appears whole
// or not at all. The bytes go through a CheckpointIO; the ranks agree through their collectives,
// so that when any rank fails, every rank throws.
#include <exception>
#include <filesystem>
#include <functional>
#include <thread>
#include <vector>

#include "checkpoint/checkpoint_io.h"
#include "checkpoint/checkpoint_layout.h"
#include "checkpoint/sharded_checkpoint.h"
#include "core/state_dict.h"
#include "strategies/host_snapshot.h"
#include "strategies/loaded_checkpoint.h"
#include "strategies/strategy_collectives.h"

namespace volt {

// Note [Checkpoints written in the background] A save in the background takes a snapshot of the
// checkpoint on the calling thread: every tensor copied to host memory, so that the next
// optimizer step cannot change what is written (Lightning's #21079) and a device holds no second
// copy (HostSnapshot: the host tensors are kept for the next save, and a device's tensors are
// copied asynchronously into pinned memory, Note [Snapshots of device memory]). A thread writes the snapshot through
// the CheckpointIO, atomically as any write. At most one write is in flight per strategy: the next save, load or the
// end of the run first finishes it, which is where the ranks agree on its success (a failure is thrown there, on every
// rank) and, in the Sharded layout, where rank 0 renames the complete directory into place. A removal asked for
// meanwhile (ModelCheckpoint dropping an older file) waits for that point too, so that a kill at any moment leaves the
// previous checkpoint loadable. A run that ends without finishing leaves a Full file complete (its thread is joined)
// and a Sharded one unwritten, with a warning.
class BackgroundCheckpointWrite {
 public:
  BackgroundCheckpointWrite() = default;
  ~BackgroundCheckpointWrite();
  BackgroundCheckpointWrite(const BackgroundCheckpointWrite&) = delete;
  BackgroundCheckpointWrite& operator=(const BackgroundCheckpointWrite&) = delete;

  bool pending() const { return pending_; }

 private:
  friend void save_checkpoint_files(StrategyCollectives&, CheckpointIO&, CheckpointLayout, const StateDict&,
                                    const std::filesystem::path&, BackgroundCheckpointWrite&, bool);
  friend void finish_checkpoint_writes(StrategyCollectives&, CheckpointIO&, BackgroundCheckpointWrite&);
  friend void remove_checkpoint_files(StrategyCollectives&, CheckpointIO&, const std::filesystem::path&,
                                      BackgroundCheckpointWrite&);

  bool pending_ = false;
  CheckpointLayout layout_ = CheckpointLayout::Full;
  std::filesystem::path path_, temporary_;  // temporary_: the Sharded layout's directory
  std::thread writer_;                      // on the ranks that write
  std::exception_ptr failure_;              // set by writer_ before it ends
  std::vector<std::filesystem::path> removals_;
  HostSnapshot snapshot_;  // the last snapshot's host tensors, reused by the next
};

// Writes `checkpoint` atomically in `layout`: the file `path` (Full), or this rank's shard into
// the directory `path` (Sharded); with `in_background`, from a snapshot on a thread of `pending`
// (Note [Checkpoints written in the background]). First finishes a write still pending. [collective]
void save_checkpoint_files(StrategyCollectives& collectives, CheckpointIO& io, CheckpointLayout layout,
                           const StateDict& checkpoint, const std::filesystem::path& path,
                           BackgroundCheckpointWrite& pending, bool in_background = false);
// Waits for the write in flight, if any; every rank learns whether it succeeded (throws
// CheckpointError otherwise); then puts a Sharded directory in place and runs the removals asked
// for meanwhile. [collective]
void finish_checkpoint_writes(StrategyCollectives& collectives, CheckpointIO& io, BackgroundCheckpointWrite& pending);
// This rank's view of the checkpoint at `path`: the file; this rank's shard of a sharded directory
// that `strategy` wrote in `layout` at this world size, with this run's layout (`own_layout`, when
// given, says so of a shard: CheckpointState::is_own_layout); any other sharded directory put together
// into the full layout (Note [Reading a sharded checkpoint anywhere], with one warning on global
// rank 0 saying so and what restarts). With `reads_slices` (CheckpointState::reads_slices), that
// full layout keeps its placeholders and the result's `slices` reads them. Throws CheckpointError when missing or
// damaged, and on every rank when the shards the ranks read are of different saves (Note [A save's identity] in
// run/checkpoint_header.cpp). [collective for the Sharded layout]
LoadedCheckpoint load_checkpoint_files(StrategyCollectives& collectives, CheckpointIO& io,
                                       const std::filesystem::path& path, const std::string& strategy,
                                       CheckpointLayout layout, bool reads_slices = false,
                                       const std::function<bool(const StateDict&)>& own_layout = {});
// Global rank 0 removes the checkpoint file or directory, once the write in flight (if any) is
// finished. [collective]
void remove_checkpoint_files(StrategyCollectives& collectives, CheckpointIO& io, const std::filesystem::path& path,
                             BackgroundCheckpointWrite& pending);

}  // namespace volt

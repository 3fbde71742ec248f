// The directory mechanics of the Sharded layout and the agreement of the ranks around a write
// (Note [Checkpoint layouts]).
#include "strategies/checkpoint_files.h"

#include <fcntl.h>
#include <stdio.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <functional>
#include <source_location>
#include <utility>

#include "checkpoint/atomic_file.h"
#include "checkpoint/shard_index.h"
#include "checkpoint/sharded_checkpoint.h"
#include "core/error.h"
#include "core/warning.h"

namespace fs = std::filesystem;

namespace volt {
namespace {

// Runs `body` where `run_here` holds; then every rank learns whether it succeeded (the decision is
// a collective, so it is also the barrier after the write). A failure is rethrown where it
// happened and reported as a CheckpointError on the other ranks.
void run_and_agree(StrategyCollectives& strategy, bool run_here, bool all_ranks_ran, const std::string& what,
                   const std::function<void()>& body, std::source_location site = std::source_location::current()) {
  std::exception_ptr failure;
  if (run_here) {
    try {
      body();
    } catch (...) {
      failure = std::current_exception();
    }
  }
  // The caller's line names the agreement (Note [Which decision]): a save and a removal differ.
  const bool ok = all_ranks_ran ? strategy.reduce_boolean_decision(failure == nullptr, /*all=*/true, site)
                                : strategy.broadcast_decision(failure == nullptr, site);
  if (failure) std::rethrow_exception(failure);
  const auto topology = strategy.topology();
  check<CheckpointError>(ok, what, " failed on ", all_ranks_ran ? "another rank" : "global rank 0", " (this is rank ",
                         topology.global_rank, " of ", topology.world_size, "); see that rank's error");
}

// Moves the complete directory `temporary` to `path` in one step, also when `path` exists (the
// two are exchanged, then the old one removed), so that a reader never sees a partial directory.
void replace_directory(const fs::path& temporary, const fs::path& path) {
  checkpoint_test_kill_point("before_rename");
  if (::renameat2(AT_FDCWD, temporary.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) != 0) {
    check<CheckpointError>(errno == EEXIST, "checkpoint: cannot rename '", temporary.string(), "' to '", path.string(),
                           "': ", std::strerror(errno));
    check<CheckpointError>(::renameat2(AT_FDCWD, temporary.c_str(), AT_FDCWD, path.c_str(), RENAME_EXCHANGE) == 0,
                           "checkpoint: cannot replace '", path.string(), "' with '", temporary.string(),
                           "': ", std::strerror(errno));
    std::error_code ignored;
    fs::remove_all(temporary, ignored);  // the previous checkpoint, now under the temporary name
  }
  sync_directory(path.parent_path().empty() ? fs::path(".") : path.parent_path());
}

void prepare_directory(StrategyCollectives& collectives, const fs::path& temporary) {
  run_and_agree(
      collectives, collectives.topology().global_rank == 0, false, "preparing '" + temporary.string() + "'", [&] {
        std::error_code error;
        fs::remove_all(temporary, error);  // left behind by a writer that was killed
        fs::create_directories(temporary, error);
        check<CheckpointError>(!error, "checkpoint: cannot create '", temporary.string(), "': ", error.message());
      });
}

// Every rank's own shard belongs to global rank 0's save (Note [A save's identity] in
// run/checkpoint_header.cpp), or every rank throws CheckpointError before any of them trains:
// naming its file where it differs. [collective]
void check_one_save(StrategyCollectives& collectives, const StateDict& shard, const fs::path& file,
                    const fs::path& directory) {
  const int64_t mine = save_id_of(shard);
  const int64_t root = collectives.broadcast_int(mine);
  const bool same = collectives.topology().world_size == 1 || collectives.reduce_boolean_decision(mine == root, true);
  check<CheckpointError>(mine == root, file.string(), " belongs to save ", mine, ", ",
                         shard_file(directory, 0).filename().string(), " to save ", root,
                         ": shards of two saves (another run, or another save of this one) are mixed in '",
                         directory.string(), "'; resume from a checkpoint whose shards were written together");
  check<CheckpointError>(same, "checkpoint '", directory.string(),
                         "': another rank's shard belongs to another save "
                         "than ",
                         shard_file(directory, 0).filename().string(),
                         " (see that rank's error): shards of "
                         "two saves are mixed in it; resume from a checkpoint whose shards were written together");
}

fs::path temporary_directory(const fs::path& path) {
  check<CheckpointError>(!path.filename().empty(), "checkpoint: expected a path to name a sharded checkpoint, got '",
                         path.string(), "'");
  std::string hidden(1, '.');  // built by appending: GCC 12 warns falsely on "." + std::string
  hidden += path.filename().string();
  hidden += ".tmp";
  return path.parent_path() / hidden;
}

}  // namespace

BackgroundCheckpointWrite::~BackgroundCheckpointWrite() {
  if (writer_.joinable()) writer_.join();
  if (pending_ && layout_ == CheckpointLayout::Sharded && !temporary_.empty()) {
    warn("checkpoint: the sharded checkpoint '" + path_.string() +
         "' written in the background was not finished "
         "(the run ended before its next save, load or end); it was not put in place. Finish the writes before "
         "the end (Fabric::finish_checkpoint_writes)");
  } else if (failure_) {
    try {
      std::rethrow_exception(failure_);
    } catch (const std::exception& e) {
      warn(std::string("checkpoint: a write in the background failed: ") + e.what());
    }
  }
}

void finish_checkpoint_writes(StrategyCollectives& collectives, CheckpointIO& io, BackgroundCheckpointWrite& pending) {
  if (!pending.pending_) return;
  if (pending.writer_.joinable()) pending.writer_.join();
  const auto failure = std::exchange(pending.failure_, nullptr);
  const auto layout = pending.layout_;
  const auto path = pending.path_, temporary = std::exchange(pending.temporary_, fs::path());
  auto removals = std::exchange(pending.removals_, {});
  pending.pending_ = false;
  const auto topology = collectives.topology();
  const bool sharded = layout == CheckpointLayout::Sharded;
  run_and_agree(collectives, sharded || topology.global_rank == 0, sharded,
                "writing checkpoint '" + path.string() + "' in the background", [&] {
                  if (failure) std::rethrow_exception(failure);
                });
  if (sharded) {
    run_and_agree(collectives, topology.global_rank == 0, false, "renaming '" + temporary.string() + "'",
                  [&] { replace_directory(temporary, path); });
  }
  for (const auto& removal : removals) remove_checkpoint_files(collectives, io, removal, pending);
}

void save_checkpoint_files(StrategyCollectives& collectives, CheckpointIO& io, CheckpointLayout layout,
                           const StateDict& checkpoint, const fs::path& path, BackgroundCheckpointWrite& pending,
                           bool in_background) {
  finish_checkpoint_writes(collectives, io, pending);
  const auto topology = collectives.topology();
  if (in_background) {
    const bool writes_here = layout == CheckpointLayout::Sharded || topology.global_rank == 0;
    fs::path file = path;
    if (layout == CheckpointLayout::Sharded) {
      pending.temporary_ = temporary_directory(path);
      prepare_directory(collectives, pending.temporary_);
      file = shard_file(pending.temporary_, topology.global_rank);
    }
    pending.pending_ = true;
    pending.layout_ = layout;
    pending.path_ = path;
    if (writes_here) {
      auto snapshot = StateDict::from_ivalue(pending.snapshot_.take(checkpoint.to_ivalue()), "checkpoint snapshot");
      pending.writer_ = std::thread([&io, &pending, snapshot = std::move(snapshot), file] {
        try {
          pending.snapshot_.wait_until_copied();  // a device's copies may still be in flight
          io.save(snapshot, file);
        } catch (...) {
          pending.failure_ = std::current_exception();
        }
      });
    }
    return;
  }
  if (layout == CheckpointLayout::Full) {
    run_and_agree(collectives, topology.global_rank == 0, false, "writing checkpoint '" + path.string() + "'",
                  [&] { io.save(checkpoint, path); });
    return;
  }
  const fs::path temporary = temporary_directory(path);
  prepare_directory(collectives, temporary);
  run_and_agree(collectives, true, true,
                "writing shard " + std::to_string(topology.global_rank) + " of '" + path.string() + "'",
                [&] { io.save(checkpoint, shard_file(temporary, topology.global_rank)); });
  run_and_agree(collectives, topology.global_rank == 0, false, "renaming '" + temporary.string() + "'",
                [&] { replace_directory(temporary, path); });
}

LoadedCheckpoint load_checkpoint_files(StrategyCollectives& collectives, CheckpointIO& io, const fs::path& path,
                                       const std::string& strategy, CheckpointLayout layout, bool reads_slices,
                                       const std::function<bool(const StateDict&)>& own_layout_of) {
  std::error_code error;
  if (!fs::is_directory(path, error)) return {io.load(path), nullptr};
  const auto topology = collectives.topology();
  // This rank's own shard, when this strategy wrote the directory at this world size, on every
  // rank or on none: the ranks agree which way they read.
  if (layout == CheckpointLayout::Sharded) {
    const fs::path own = shard_file(path, topology.global_rank);
    StateDict shard;
    bool own_layout = false;
    if (fs::exists(own, error)) {
      shard = io.load(own);
      own_layout = shard.contains("shard") && shard.child("shard").get_int("world_size") == topology.world_size &&
                   shard.child("shard").get_int("rank") == topology.global_rank &&
                   shard.child("strategy").get_string("name") == strategy && (!own_layout_of || own_layout_of(shard));
    }
    if (topology.world_size == 1 || collectives.reduce_boolean_decision(own_layout, /*all=*/true)) {
      if (own_layout) {
        check_one_save(collectives, shard, own, path);
        return {shard, nullptr};
      }
    }
  }
  // Anything else reads every shard and puts them together (Note [Reading a sharded checkpoint
  // anywhere] in checkpoint/sharded_checkpoint.h).
  auto sharded = std::make_shared<ShardedCheckpoint>(io, path);
  if (topology.global_rank == 0) {
    const auto shards = std::to_string(sharded->shards());
    std::string message =
        "checkpoint '" + path.string() + "': sharded by strategy '" + sharded->strategy() + "' over " + shards +
        " ranks, loaded by '" + strategy + "' with " + std::to_string(topology.world_size) +
        (reads_slices ? ": each rank reads the slices of the " + shards + " shards that it owns"
                      : ": every rank reads the " + shards + " shards and puts the full checkpoint together");
    for (const auto& note : sharded->notes()) message += "; " + note;
    warn(message);
  }
  if (reads_slices) return {sharded->full(), sharded};
  return {sharded->materialize(sharded->full()), nullptr};
}

void remove_checkpoint_files(StrategyCollectives& collectives, CheckpointIO& io, const fs::path& path,
                             BackgroundCheckpointWrite& pending) {
  if (pending.pending_) {
    pending.removals_.push_back(path);  // after the write in flight: the previous file stays until then
    return;
  }
  run_and_agree(collectives, collectives.is_global_zero(), false, "removing checkpoint '" + path.string() + "'",
                [&] { io.remove(path); });
}

}  // namespace volt

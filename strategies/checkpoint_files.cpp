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

#include "checkpoint/atomic_file.h"
#include "core/error.h"

namespace fs = std::filesystem;

namespace volt {
namespace {

fs::path shard_file(const fs::path& directory, int64_t rank) {
  return directory / ("shard_" + std::to_string(rank) + ".ckpt");
}

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
  check<CheckpointError>(ok, what, " failed on ", all_ranks_ran ? "another rank" : "global rank 0",
                         " (this is rank ", topology.global_rank, " of ", topology.world_size,
                         "); see that rank's error");
}

// Moves the complete directory `temporary` to `path` in one step, also when `path` exists (the
// two are exchanged, then the old one removed), so that a reader never sees a partial directory.
void replace_directory(const fs::path& temporary, const fs::path& path) {
  checkpoint_test_kill_point();
  if (::renameat2(AT_FDCWD, temporary.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) != 0) {
    check<CheckpointError>(errno == EEXIST, "checkpoint: cannot rename '", temporary.string(), "' to '",
                           path.string(), "': ", std::strerror(errno));
    check<CheckpointError>(::renameat2(AT_FDCWD, temporary.c_str(), AT_FDCWD, path.c_str(), RENAME_EXCHANGE) == 0,
                           "checkpoint: cannot replace '", path.string(), "' with '", temporary.string(), "': ",
                           std::strerror(errno));
    std::error_code ignored;
    fs::remove_all(temporary, ignored);  // the previous checkpoint, now under the temporary name
  }
  sync_directory(path.parent_path().empty() ? fs::path(".") : path.parent_path());
}

}  // namespace

void save_checkpoint_files(StrategyCollectives& collectives, CheckpointIO& io, CheckpointLayout layout,
                           const StateDict& checkpoint, const fs::path& path) {
  const auto topology = collectives.topology();
  if (layout == CheckpointLayout::Full) {
    run_and_agree(collectives, topology.global_rank == 0, false, "writing checkpoint '" + path.string() + "'",
                  [&] { io.save(checkpoint, path); });
    return;
  }
  check<CheckpointError>(!path.filename().empty(), "checkpoint: expected a path to name a sharded checkpoint, got '",
                         path.string(), "'");
  std::string hidden(1, '.');  // built by appending: GCC 12 warns falsely on "." + std::string
  hidden += path.filename().string();
  hidden += ".tmp";
  const fs::path temporary = path.parent_path() / hidden;
  run_and_agree(collectives, topology.global_rank == 0, false, "preparing '" + temporary.string() + "'", [&] {
    std::error_code error;
    fs::remove_all(temporary, error);  // left behind by a writer that was killed
    fs::create_directories(temporary, error);
    check<CheckpointError>(!error, "checkpoint: cannot create '", temporary.string(), "': ", error.message());
  });
  run_and_agree(collectives, true, true, "writing shard " + std::to_string(topology.global_rank) + " of '" + path.string() + "'",
                [&] { io.save(checkpoint, shard_file(temporary, topology.global_rank)); });
  run_and_agree(collectives, topology.global_rank == 0, false, "renaming '" + temporary.string() + "'",
                [&] { replace_directory(temporary, path); });
}

StateDict load_checkpoint_files(const StrategyCollectives& collectives, CheckpointIO& io, const fs::path& path) {
  std::error_code error;
  if (!fs::is_directory(path, error)) return io.load(path);
  const auto topology = collectives.topology();
  const fs::path shard = shard_file(path, topology.global_rank);
  check<CheckpointError>(fs::exists(shard, error), "checkpoint: '", path.string(),
                         "' is a directory without a shard for global rank ", topology.global_rank, " (",
                         shard.filename().string(), "); it is not a sharded checkpoint, or was written by fewer than ",
                         topology.world_size, " ranks");
  return io.load(shard);
}

void remove_checkpoint_files(StrategyCollectives& collectives, CheckpointIO& io, const fs::path& path) {
  run_and_agree(collectives, collectives.is_global_zero(), false, "removing checkpoint '" + path.string() + "'",
                [&] { io.remove(path); });
}

}  // namespace volt

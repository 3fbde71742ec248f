#include "run/checkpoint_header.h"

#include <random>

#include "checkpoint/checkpoint_format.h"
#include "core/error.h"

namespace volt {
namespace {

// Note [A save's identity]: the shards of one sharded save are files written by different
// ranks, and a directory can come to hold shards of two saves (a shard copied in from another run
// at the same step, or left from an earlier save of the same run). Their epoch and step cannot
// tell two runs apart, so every shard of a save carries the same save_id, a random number global
// rank 0 draws and broadcasts as the save is made; every reader compares them before any rank
// trains: load_shards (putting shards together, volt-ckpt verify, ckpt_path "last") across the
// files, and the ranks that each read their own shard across the ranks (load_checkpoint_files).
// Shards written before save ids compare as equal to each other only.
int64_t agreed_save_id(const Strategy& strategy) {
  int64_t id = 0;
  if (strategy.topology().global_rank == 0) {
    std::random_device device;
    id = static_cast<int64_t>(((static_cast<uint64_t>(device()) << 32) | device()) >> 1);  // >= 0
  }
  return strategy.collectives().broadcast_int(id);
}

}  // namespace

std::string checkpoint_layout_name(CheckpointLayout layout) {
  return layout == CheckpointLayout::Full ? "full" : "sharded";
}

CheckpointLayout checkpoint_layout_of(const StateDict& checkpoint) {
  return checkpoint.contains("layout") && checkpoint.get_string("layout") == "sharded" ? CheckpointLayout::Sharded
                                                                                       : CheckpointLayout::Full;
}

StateDict checkpoint_header(const Strategy& strategy, CheckpointLayout layout) {
  StateDict header;
  header.set("volt_version", std::string(VOLT_VERSION));
  header.set("format_version", kCheckpointFormatVersion);
  header.set("layout", checkpoint_layout_name(layout));
  if (layout == CheckpointLayout::Sharded) {
    const auto topology = strategy.topology();
    StateDict shard;
    shard.set("rank", topology.global_rank);
    shard.set("world_size", topology.world_size);
    shard.set("save_id", agreed_save_id(strategy));
    header.set("shard", shard);
  }
  return header;
}

void check_checkpoint_readable(const StateDict& checkpoint, const Strategy& strategy, const std::string& source) {
  if (checkpoint.contains("format_version")) {
    const int64_t version = checkpoint.get_int("format_version");
    check<CheckpointError>(version <= kCheckpointFormatVersion, source, ": written in checkpoint format version ",
                           version, " by a newer volt; this build reads format versions up to ",
                           kCheckpointFormatVersion, ". Load it with a newer volt");
  }
  if (checkpoint_layout_of(checkpoint) == CheckpointLayout::Sharded) {
    const auto shard = checkpoint.child("shard");
    const auto writer = checkpoint.child("strategy").get_string("name");
    const auto topology = strategy.topology();
    check<CheckpointError>(strategy.checkpointing().layout() == CheckpointLayout::Sharded &&
                               writer == strategy.name() && shard.get_int("world_size") == topology.world_size,
                           source, ": a sharded checkpoint written by strategy '", writer, "' with ",
                           shard.get_int("world_size"), " ranks; this run uses '", strategy.name(), "' with ",
                           topology.world_size,
                           " ranks. Resume it with the same strategy and world size, or "
                           "resume from a full checkpoint");
  }
}

}  // namespace volt

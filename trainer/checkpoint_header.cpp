#include "trainer/checkpoint_header.h"

#include "checkpoint/checkpoint_format.h"
#include "core/error.h"

namespace volt {

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
    check<CheckpointError>(strategy.checkpointing().layout() == CheckpointLayout::Sharded && writer == strategy.name() &&
                               shard.get_int("world_size") == topology.world_size,
                           source, ": a sharded checkpoint written by strategy '", writer, "' with ",
                           shard.get_int("world_size"), " ranks; this run uses '", strategy.name(), "' with ",
                           topology.world_size, " ranks. Resume it with the same strategy and world size, or "
                           "resume from a full checkpoint");
  }
}

}  // namespace volt

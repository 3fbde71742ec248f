#pragma once
// The index each shard of a sharded checkpoint carries (its format: Note [Reading a sharded
// checkpoint anywhere] in checkpoint/sharded_checkpoint.h), and a sharded directory's shard files,
// checked to be one save's complete set.
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_io.h"
#include "core/state_dict.h"

namespace volt {

// One flat tensor of a shard, as the index describes it.
struct FlatShardIndex {
  std::string key;
  int64_t numel = 0, shard_offset = 0, shard_numel = 0;
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<int64_t> offsets;
  StateDict to_state_dict() const;
  // Throws CheckpointError when its lists differ in length.
  static FlatShardIndex from_state_dict(const StateDict& state);
};

// How one optimizer's state is laid out in a shard (Note [Reading a sharded checkpoint anywhere]).
struct OptimizerShardIndex {
  std::string kind = "replicated";  // "replicated" | "partitioned" | "flat"
  struct Group {
    std::vector<std::string> flat;      // per original parameter: its flat key, "" outside one
    std::vector<int64_t> entry, stepped;
  };
  std::vector<Group> groups;  // "flat" only
  StateDict to_state_dict() const;
  static OptimizerShardIndex from_state_dict(const StateDict& state);
};

StateDict shard_index(const std::vector<FlatShardIndex>& flats, const std::vector<OptimizerShardIndex>& optimizers);

// The file of `rank`'s shard in a sharded checkpoint directory.
std::filesystem::path shard_file(const std::filesystem::path& directory, int64_t rank);

// The save a shard belongs to (its "shard" header's save_id; -1 for a shard written before save ids).
int64_t save_id_of(const StateDict& shard);

// Loads every shard of `directory` through `load` (which returns the shard's dict, kept by the
// caller while the others load), checking that they are one save's complete set: throws
// CheckpointError naming the file when one is missing, not a shard, from another save (another
// position, or another save_id: Note [A save's identity]) or from a directory of more shards than
// its files say.
void load_shards(const std::filesystem::path& directory,
                 const std::function<const StateDict&(const std::filesystem::path&)>& load);

// Every shard of the sharded checkpoint `directory`, in rank order, read and verified whole:
// throws CheckpointError naming the file when one is missing, damaged, from another save or from a
// directory of more shards than its files say.
std::vector<StateDict> read_shards(CheckpointIO& io, const std::filesystem::path& directory);

}  // namespace volt

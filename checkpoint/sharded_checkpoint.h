#pragma once
// Note [Reading a sharded checkpoint anywhere]
// A Sharded checkpoint (Note [Checkpoint layouts]) is a directory of shard_<rank>.ckpt files.
// Each shard carries a "shard_index" that says, without the strategy that wrote it, how its
// pieces fit into the full layout:
//   "flat_parameters": [{"key", "numel", "shard_offset", "shard_numel", "names", "shapes",
//                        "offsets"}]  a flat tensor of this shard's "state_dict" (fsdp's
//                        "<unit>.flat_shard") is the slice [shard_offset, shard_offset +
//                        shard_numel) of a flat of `numel` values (padding past it), holding the
//                        parameters `names` of `shapes` at `offsets`
//   "optimizers": [{"kind", "groups"}]  per optimizer: "replicated" (PyTorch's layout, the same
//                        on every rank), "partitioned" (PyTorch's layout holding the state of the
//                        parameters this rank owns: ZeRO/OSS) or "flat" (the state of the flat
//                        shards and of the parameters outside them; "groups" lists, per param
//                        group, each original parameter's flat key ("" when outside), its entry in
//                        that flat and the position of the tensor it is stepped through)
// assemble_full_checkpoint puts the shards back into the one full checkpoint that the same run
// would have written with state_dict_type=full (the tensors bitwise equal): any strategy at any
// world size loads that (Strategy::load_checkpoint does this when the directory is not its own
// layout), and volt-ckpt converts and exports it. What is kept per rank and has no place in the
// full layout restarts: the strategy's own section (its name says what), and the gradients of an
// open accumulation window under fsdp; the random states become "rng_states_per_rank".
// Every rank reading every shard holds the whole model while it assembles: the price of reading a
// sharded checkpoint under another strategy or world size (docs/checkpoints.md).
#include <filesystem>
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
};

// How one optimizer's state is laid out in a shard (see the Note).
struct OptimizerShardIndex {
  std::string kind = "replicated";  // "replicated" | "partitioned" | "flat"
  struct Group {
    std::vector<std::string> flat;      // per original parameter: its flat key, "" outside one
    std::vector<int64_t> entry, stepped;
  };
  std::vector<Group> groups;  // "flat" only
  StateDict to_state_dict() const;
};

StateDict shard_index(const std::vector<FlatShardIndex>& flats, const std::vector<OptimizerShardIndex>& optimizers);

// The file of `rank`'s shard in a sharded checkpoint directory.
std::filesystem::path shard_file(const std::filesystem::path& directory, int64_t rank);

// Every shard of the sharded checkpoint `directory`, in rank order, read and verified: throws
// CheckpointError naming the file when one is missing, damaged, from another save or from a
// directory of more shards than its files say.
std::vector<StateDict> read_shards(CheckpointIO& io, const std::filesystem::path& directory);

// The full checkpoint of `shards` (see the Note); `notes` receives what restarts (one line each).
// `source` names the directory in errors.
StateDict assemble_full_checkpoint(const std::vector<StateDict>& shards, const std::string& source,
                                   std::vector<std::string>* notes = nullptr);

}  // namespace volt

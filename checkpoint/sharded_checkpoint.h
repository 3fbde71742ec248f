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
// ShardedCheckpoint puts the shards back into the one full checkpoint that the same run would
// have written with state_dict_type=full (the tensors bitwise equal): any strategy at any world
// size loads that (Strategy::load_checkpoint does this when the directory is not its own
// layout), and volt-ckpt converts and exports it. What is kept per rank and has no place in the
// full layout restarts: the strategy's own section (its name says what), and the gradients of an
// open accumulation window under fsdp; the random states become "rng_states_per_rank".
//
// Putting together reads nothing of the model and optimizer tensors: the shards are opened
// lazily (Note [Reading parts of a checkpoint] in checkpoint_format.h) and each tensor of the full
// layout is a list of pieces, the runs of its elements in the shard files. Its place in the full
// checkpoint holds a placeholder (an empty meta tensor of its shape and dtype). A strategy that
// keeps whole tensors materializes the full checkpoint (every rank reads every shard); one that
// shards parameters (fsdp) reads only the element ranges of the slices it owns, so that no rank
// ever holds the whole model (Note [Loading a slice] in strategies/fsdp/fsdp_checkpoint_state.h).
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_format.h"
#include "checkpoint/checkpoint_io.h"
#include "checkpoint/shard_index.h"
#include "core/state_dict.h"

namespace volt {

// A run of a tensor's elements: in a file, or in memory (1-D, contiguous).
struct TensorPiece {
  int64_t numel = 0;
  std::optional<TensorInFile> in_file;
  torch::Tensor values;
};

// The full checkpoint of a sharded checkpoint directory, its large tensors left in the files
// (see the Note).
class ShardedCheckpoint {
 public:
  // Opens every shard of `directory` (each checked like read_shards does, its tensors' data left
  // unread) and puts the full checkpoint together.
  ShardedCheckpoint(CheckpointIO& io, const std::filesystem::path& directory);

  // The full checkpoint: its "state_dict" and "optimizer_states" hold placeholders.
  const StateDict& full() const { return full_; }
  // What restarts, one line each.
  const std::vector<std::string>& notes() const { return notes_; }
  int64_t shards() const { return static_cast<int64_t>(files_.size()); }
  std::string strategy() const;

  bool is_placeholder(const torch::Tensor& tensor) const;
  // Elements [begin, begin + out.numel()) of `tensor` (a placeholder of full(), or any real
  // tensor), flattened, into `out` (1-D, contiguous; converted to its dtype).
  void read(const torch::Tensor& tensor, int64_t begin, torch::Tensor out) const;
  // `tensor`'s values (a placeholder read whole; a real tensor as it is).
  torch::Tensor materialize(const torch::Tensor& tensor) const;
  // `value` with every placeholder in it read.
  c10::IValue materialize(const c10::IValue& value) const;
  StateDict materialize(const StateDict& state) const;
  // Bytes read from the shard files since they were opened, verification blocks included.
  uint64_t bytes_read() const;

 private:
  struct Pieces {
    std::vector<int64_t> shape;
    c10::ScalarType dtype;
    std::vector<TensorPiece> pieces;
  };
  const Pieces& pieces_of(const torch::Tensor& placeholder) const;
  friend class ShardAssembly;

  std::vector<LazyCheckpoint> files_;
  std::map<const void*, Pieces> placeholders_;  // of full_ (and of the shards, which it shares)
  std::vector<torch::Tensor> keep_alive_;       // the placeholders made while putting together
  StateDict full_;
  std::vector<std::string> notes_;
};

// The full checkpoint of `directory`, every tensor read: ShardedCheckpoint(io, directory)'s
// full(), materialized. `notes` receives what restarts.
StateDict assemble_full_checkpoint(CheckpointIO& io, const std::filesystem::path& directory,
                                   std::vector<std::string>* notes = nullptr);

}  // namespace volt

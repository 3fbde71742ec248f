#pragma once
// The second of the Strategy's three seams (strategy.h): what a checkpoint holds of the model, the
// optimizers, the gradients of an open accumulation window and the strategy itself, in the layout
// the strategy chooses, and how the bytes reach the disk. The defaults suit a strategy that keeps
// every tensor whole on every rank; a sharding strategy consolidates for the Full layout and
// writes its own shard for the Sharded one.
//
// Every method marked [collective] must be called by every rank at the same point; "for
// strategies that shard" means the default needs no communication.
#include <torch/torch.h>

#include <filesystem>
#include <memory>
#include <string>

#include "checkpoint/checkpoint_io.h"
#include "checkpoint/optimizer_state.h"
#include "core/state_dict.h"
#include "strategies/strategy_collectives.h"

namespace volt {

// Note [Checkpoint layouts]
// Full: one file, written by global rank 0, holding every parameter and the whole optimizer state
// unsharded and under PyTorch's names; any strategy at any world size can load it (a sharding
// strategy takes its shard from it). Sharded: a directory with one file per rank
// (shard_<rank>.ckpt), each holding the whole training state except that "state_dict" and
// "optimizer_states" are that rank's shard; only the same strategy at the same world size loads
// it. Either is written atomically: readers see the previous checkpoint or the complete new one.
enum class CheckpointLayout { Full, Sharded };

class StrategyCheckpointing : public StrategyCollectives {
 public:
  virtual CheckpointLayout checkpoint_layout() const { return CheckpointLayout::Full; }

  // The module's parameters and buffers in `layout`, tensors on any device (the file stores CPU
  // copies). [collective for strategies that shard]
  virtual StateDict model_state_dict(torch::nn::Module& module, CheckpointLayout layout);
  // Loads `state` (of `layout`) into the module in place; `source` names it in errors.
  virtual void load_model_state_dict(torch::nn::Module& module, const StateDict& state, CheckpointLayout layout,
                                     bool strict, const std::string& source);
  // An optimizer's state in `layout` (a sharded optimizer consolidates for Full). [collective
  // for strategies that shard]
  virtual StateDict optimizer_state_dict(torch::optim::Optimizer& optimizer, CheckpointLayout layout);
  virtual void load_optimizer_state_dict(torch::optim::Optimizer& optimizer, const StateDict& state,
                                         CheckpointLayout layout, const std::string& what,
                                         const ParameterNamer& name_of);

  // The gradients accumulated so far in an open accumulation window, which the step at the
  // window's end needs (ranks differ: each accumulated its own micro-batches). The result's keys
  // go into the checkpoint's fit-loop section: "accumulated_grads" (this process's, or this
  // rank's shard) or, for a Full checkpoint of several ranks, "accumulated_grads_per_rank" (every
  // rank's, for global rank 0 to write). [collective with several ranks]
  virtual StateDict accumulated_gradients(torch::nn::Module& module, CheckpointLayout layout);
  // Sets the gradients from such a section (the fit-loop section of a checkpoint): this rank's
  // entry, none when the section has none. Warns and drops them when the section was written by
  // another number of ranks.
  virtual void load_accumulated_gradients(torch::nn::Module& module, const StateDict& section,
                                          const std::string& source);

  // The strategy's own section of a checkpoint (comm-hook state, model-averager step, SlowMo
  // buffers), in `layout`: for Full, what differs per rank is gathered (gather_states) for global
  // rank 0 to write. Restored only into a strategy of the same name(). [collective]
  virtual StateDict strategy_state_dict(CheckpointLayout layout) { return {}; }
  virtual void load_strategy_state_dict(const StateDict& state, CheckpointLayout layout) {}

  // Writes `checkpoint` atomically in checkpoint_layout(): global rank 0 writes the file `path`
  // (Full), or every rank its shard into the directory `path` (Sharded). When any rank fails,
  // every rank throws. [collective]
  virtual void save_checkpoint(const StateDict& checkpoint, const std::filesystem::path& path);
  // This rank's view of the checkpoint at `path`: the file, or this rank's shard of a sharded
  // directory. Throws CheckpointError when missing, damaged, or sharded for another world size.
  virtual StateDict load_checkpoint(const std::filesystem::path& path);
  // Global rank 0 removes the checkpoint file or directory. [collective]
  virtual void remove_checkpoint(const std::filesystem::path& path);
  // Where checkpoint bytes go; the default writes local files (CheckpointIO).
  void set_checkpoint_io(std::shared_ptr<CheckpointIO> checkpoint_io);
  CheckpointIO& checkpoint_io() const { return *checkpoint_io_; }

 private:
  std::shared_ptr<CheckpointIO> checkpoint_io_ = std::make_shared<CheckpointIO>();
};

}  // namespace volt

#pragma once
// The Strategy decides where parameters, gradients and optimizer state live across processes and
// how they are kept in agreement. The Trainer owns the loop and asks its Strategy for everything
// that involves other ranks; it never calls a collective itself (../shared/DESIGN.md).
//
// Contract, in the order the Trainer calls it:
//   setup_environment()  process group and devices                       [collective]
//   setup_module()       model on device, broadcast or shard             [collective]
//   setup_optimizers()   the user's optimizers (built after setup_module), possibly wrapped
//   per micro-batch:     no_sync() scope unless it is the window's last micro-batch;
//                        forward_context() around the step; backward()
//   per window:          optimizer_step() for each optimizer, then after_optimizer_steps()
//   teardown()
// Methods marked [collective] must be called by every rank at the same point.
// A Strategy is used by one Trainer on one thread; it is not thread-safe.
#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "distributed/reduce_op.h"
#include "distributed/cluster/cluster_environment.h"
#include "checkpoint/checkpoint_io.h"
#include "checkpoint/optimizer_state.h"
#include "trainer/module.h"
#include "precision/precision.h"
#include "core/scope_guard.h"
#include "core/state_dict.h"
#include "core/run_stage.h"

namespace volt {

// What the Trainer resolved from its options before the strategy sets up.
struct StrategyEnvironment {
  torch::Device device = torch::kCPU;           // the device this process computes on
  int64_t devices = 1;                          // processes per node the user asked for
  int64_t num_nodes = 1;
  std::chrono::milliseconds timeout{1800000};   // bound on every collective
  // Who started the processes and where they meet (set by the Trainer; distributed strategies
  // read their topology and rendezvous from it).
  std::shared_ptr<const ClusterEnvironment> cluster;
};

// Note [Checkpoint layouts]
// Full: one file, written by global rank 0, holding every parameter and the whole optimizer state
// unsharded and under PyTorch's names; any strategy at any world size can load it (a sharding
// strategy takes its shard from it). Sharded: a directory with one file per rank
// (shard_<rank>.ckpt), each holding the whole training state except that "state_dict" and
// "optimizer_states" are that rank's shard; only the same strategy at the same world size loads
// it. Either is written atomically: readers see the previous checkpoint or the complete new one.
enum class CheckpointLayout { Full, Sharded };

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;
  // Whether this strategy can run several processes (a ParallelStrategy). The Trainer refuses a
  // non-distributed strategy when the cluster environment has more than one process.
  virtual bool is_distributed() const { return false; }

  // ---- lifecycle
  virtual void setup_environment(const StrategyEnvironment& environment);  // [collective]
  // Moves the module to root_device() and prepares it (broadcast, sharding). Runs before
  // configure_optimizers, so that optimizers see the parameters as the strategy laid them out.
  // [collective]
  virtual void setup_module(Module& module);
  // Returns the optimizers the loop steps: the given ones, or wrappers around them (e.g. a
  // sharded optimizer). [collective]
  virtual std::vector<std::shared_ptr<torch::optim::Optimizer>> setup_optimizers(
      std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers) {
    return optimizers;
  }
  virtual void teardown() {}
  // The run is failing with `error` on this rank (called by the Trainer before it rethrows).
  // Distributed strategies tell the other ranks why, so their errors can name this one.
  virtual void on_exception(const std::exception& error) {}

  // Holds `precision` and installs all_reduce(·, Max) as its found-inf reducer, so that a skipped
  // AMP step is skipped on every rank. That reducer calls this strategy, which must therefore
  // outlive the precision's use.
  void set_precision(std::shared_ptr<Precision> precision);
  Precision& precision() const;

  // ---- who am I
  virtual ProcessTopology topology() const { return {}; }
  bool is_global_zero() const { return topology().global_rank == 0; }
  const torch::Device& root_device() const { return environment_.device; }

  // ---- one training step
  // Micro-batches inside this scope accumulate gradients locally without synchronizing.
  virtual ScopeGuard no_sync() { return {}; }
  // The region in which a step of `stage` runs its forward (the precision's autocast, plus a
  // strategy's pre-forward work such as DDP's buffer broadcast).
  virtual ScopeGuard forward_context(RunningStage stage);
  // pre_backward → precision().backward → post_backward.
  void backward(const torch::Tensor& loss);
  // Unscales, runs `before_step` (the Trainer's hooks and clipping), then steps through the
  // precision; returns whether the step was taken (false when the GradScaler skipped it).
  virtual bool optimizer_step(torch::optim::Optimizer& optimizer,
                              const std::function<void(torch::optim::Optimizer&)>& before_step);
  // After all optimizers of a window stepped; `global_step` counts windows so far. Strategies
  // that average models periodically do it here. [collective for such strategies]
  virtual void after_optimizer_steps(int64_t global_step);
  // Clears gradients after a step: set to undefined by default (frees memory, like PyTorch's
  // zero_grad(set_to_none=True)); a strategy whose gradients are views into its own buffers
  // zeroes them in place instead.
  virtual void zero_grad(torch::optim::Optimizer& optimizer);
  // Clips the gradients of `optimizer`'s parameters; a sharded strategy computes the global norm.
  // Returns the total norm before clipping (clip_gradients_norm) or nothing (by value).
  virtual double clip_gradients_norm(torch::optim::Optimizer& optimizer, double max_norm,
                                     double norm_type = 2.0);
  virtual void clip_gradients_value(torch::optim::Optimizer& optimizer, double clip_value);

  // ---- collectives for the Trainer (the identity on one process)
  virtual torch::Tensor all_reduce(const torch::Tensor& value, ReduceOp op) { return value; }  // [collective]
  // `root`'s value, on every rank. [collective]
  virtual torch::Tensor broadcast(const torch::Tensor& value, int64_t root = 0) { return value; }
  // Rank 0's decision, on every rank (stopping, checkpointing). [collective]
  virtual bool broadcast_decision(bool decision) { return decision; }
  // `all`: true iff every rank decided true; otherwise true iff any did. [collective]
  virtual bool reduce_boolean_decision(bool decision, bool all = true) { return decision; }
  virtual void barrier(const std::string& name = "") {}  // [collective]

  // Numbers the strategy publishes beside the training metrics (e.g. bytes communicated); the
  // fit loop logs them with every logged step.
  virtual std::map<std::string, double> metrics() const { return {}; }

  // ---- checkpoints (strategies/strategy_checkpoint.cpp; Note [Checkpoint layouts])
  virtual CheckpointLayout checkpoint_layout() const { return CheckpointLayout::Full; }
  // The module's parameters and buffers in `layout`, tensors on any device (the file stores CPU
  // copies). [collective for strategies that shard]
  virtual StateDict model_state_dict(Module& module, CheckpointLayout layout);
  // Loads `state` (of `layout`) into the module in place; `source` names it in errors.
  virtual void load_model_state_dict(Module& module, const StateDict& state, CheckpointLayout layout,
                                     bool strict, const std::string& source);
  // An optimizer's state in `layout` (a sharded optimizer consolidates for Full). [collective
  // for strategies that shard]
  virtual StateDict optimizer_state_dict(torch::optim::Optimizer& optimizer, CheckpointLayout layout);
  virtual void load_optimizer_state_dict(torch::optim::Optimizer& optimizer, const StateDict& state,
                                         CheckpointLayout layout, const std::string& what,
                                         const ParameterNamer& name_of);
  // The strategy's own section of a checkpoint (comm-hook state, model-averager step, SlowMo
  // buffers); restored only into a strategy of the same name().
  virtual StateDict strategy_state_dict() { return {}; }
  virtual void load_strategy_state_dict(const StateDict& state) {}
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

 protected:
  virtual void pre_backward(const torch::Tensor& loss) {}
  virtual void post_backward(const torch::Tensor& loss) {}
  const StrategyEnvironment& environment() const { return environment_; }

 private:
  StrategyEnvironment environment_;
  std::shared_ptr<Precision> precision_;
  std::shared_ptr<CheckpointIO> checkpoint_io_ = std::make_shared<CheckpointIO>();
};

}  // namespace volt

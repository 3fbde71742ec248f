#pragma once
// The Strategy decides where parameters, gradients and optimizer state live across processes and
// how they are kept in agreement. The Trainer owns the loop and asks its Strategy for everything
// that involves other ranks, devices or dtypes; it never calls a collective, converts a dtype or
// moves a batch itself (docs/architecture.md).
//
// A Strategy is a lifecycle plus parts it holds, each an interface in its own header with the
// one-process behaviour as its default; a strategy replaces the parts it changes (hold()):
//   collectives()       who this process is; reductions, decisions, barriers (strategy_collectives.h)
//   gradients()         no_sync, backward hooks, zero_grad, clipping (gradient_synchronization.h)
//   placement()         devices per process, samplers, batches, forward scope (placement.h)
//   checkpointing()     model, optimizer, window and strategy state (checkpoint_state.h)
//   optimizer_sharding()  sharded optimizers' state and norm, where it shards them (optimizer_sharding.h)
//   precision(), checkpoint_io()   given by the Trainer / the user
// Note [Minimal strategy] (docs/architecture.md#the-strategy-contract): a strategy overrides
// name(); a distributed one derives from ParallelStrategy (process group, collectives, averaged
// accumulated gradients) and replaces gradients() with its synchronization, as ddp_sharded does.
//
// Contract, in the order the Trainer calls it:
//   setup_environment()  process group and devices                                [collective]
//   setup_module()       through the precision, to the device, then wrapped        [collective]
//   setup_optimizers()   the user's optimizers (built after setup_module), possibly wrapped
//   placement().distribute_loader() for each loader
//   per micro-batch:     placement().batch_to_device(); gradients().no_sync() scope unless it
//                        is the window's last micro-batch; run_step() (the forward); backward()
//   per window:          optimizer_step() for each optimizer, then after_optimizer_steps()
//   restore_module()     after a run that ended without error                      [collective]
//   teardown()
// A Strategy is used by one Trainer on one thread; it is not thread-safe.
#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_io.h"
#include "distributed/cluster/cluster_environment.h"
#include "distributed/hang_check.h"
#include "nn/activation_checkpointing_policy.h"
#include "precision/precision.h"
#include "strategies/checkpoint_state.h"
#include "strategies/gradient_synchronization.h"
#include "strategies/part_context.h"
#include "strategies/placement.h"
#include "strategies/strategy_collectives.h"

namespace volt {

class BackgroundCheckpointWrite;
class OptimizerSharding;
struct LoadedCheckpoint;

class ProcessLauncher;

// What the Trainer resolved from its options before the strategy sets up.
struct StrategyEnvironment {
  torch::Device device = torch::kCPU;           // the device this process computes on (its first)
  std::vector<torch::Device> devices;           // every device this process drives, `device` first
  int64_t processes_per_node = 1;
  int64_t num_nodes = 1;
  std::chrono::milliseconds timeout{1800000};   // bound on every collective
  bool shared_memory = true;  // CPU collectives on one host through shared memory (start_process_group)
  std::string process_group_backend = "auto";  // auto | gloo | nccl (RunOptions::process_group_backend)
  HangCheckOptions hang_check;  // Note [Diagnosing a hang] (RunOptions::hang_check)
  // Who started the processes and where they meet; distributed strategies read their topology
  // and rendezvous from it.
  std::shared_ptr<const ClusterEnvironment> cluster;
  // Starts the other local ranks when the cluster environment says this process must (volt's
  // own launcher); owned by whoever started the run, which outlives the strategy's use of it.
  ProcessLauncher* launcher = nullptr;
};

// One step's forward: the module's training/validation/test/predict step on `batch`, called on
// the module it is given (the one set up, or a replica of it).
using StepFunction = std::function<torch::Tensor(torch::nn::Module& module, const Batch& batch)>;

class Strategy : public PartContext {
 public:
  Strategy();
  virtual ~Strategy();
  Strategy(const Strategy&) = delete;
  Strategy& operator=(const Strategy&) = delete;

  std::string name() const override = 0;
  // Whether this strategy can run several processes (a ParallelStrategy). The Trainer refuses a
  // non-distributed strategy when the cluster environment has more than one process.
  virtual bool is_distributed() const { return false; }
  // Refuses, with a ConfigurationError at Trainer construction, a number of processes this
  // strategy's options cannot work with (e.g. a subgroup size that does not divide it).
  virtual void check_world_size(int64_t world_size) const {}
  // Refuses, with a NotSupportedError saying what to change, a training step of this strategy that
  // a CUDA graph cannot hold (--cuda-graph; Note [The Trainer's captured step]): by default every
  // strategy, whose step may do work on the host that a replay would skip.
  virtual void check_capturable() const;
  // Whether its optimizers are ShardedOptimizers (setup_optimizers wraps them): it holds an
  // optimizer_sharding() part, which the default checkpoint and clipping parts ask.
  bool shards_optimizer_state() const { return optimizer_sharding_ != nullptr; }
  // The module's parameters that `stepped`, a parameter of an optimizer setup_optimizers
  // returned, stands for: itself, or, where the strategy steps flattened shards (FSDP), the
  // parameters of its unit. What toggle_model() freezes so that backward leaves them alone.
  virtual std::vector<torch::Tensor> module_parameters_of(const torch::Tensor& stepped) const { return {stepped}; }

  // ---- the parts
  StrategyCollectives& collectives() const override { return *collectives_; }
  GradientSynchronization& gradients() const { return *gradients_; }
  Placement& placement() const { return *placement_; }
  CheckpointState& checkpointing() const { return *checkpointing_; }
  // Null unless the strategy shards optimizer state (optimizer_sharding.h).
  const OptimizerSharding* optimizer_sharding() const override { return optimizer_sharding_.get(); }
  // Holds `precision` and installs collectives().all_reduce(·, Max) as its found-inf reducer, so
  // that a skipped AMP step is skipped on every rank.
  void set_precision(std::shared_ptr<Precision> precision);
  Precision& precision() const override;
  void set_checkpoint_io(std::shared_ptr<CheckpointIO> checkpoint_io);  // default: local files
  CheckpointIO& checkpoint_io() const { return *checkpoint_io_; }
  // Who this process is (collectives().topology()), and the device it computes on.
  ProcessTopology topology() const override { return collectives_->topology(); }
  bool is_global_zero() const { return topology().global_rank == 0; }
  torch::Device root_device() const override { return environment_.device; }
  const StrategyEnvironment& environment() const { return environment_; }

  // ---- lifecycle
  virtual void setup_environment(const StrategyEnvironment& environment);  // [collective]
  // Converts the module through the precision, moves it to root_device(), checkpoints the modules
  // the activation checkpointing policy selects, then wraps it (wrap_module: broadcast, reducer,
  // shards), in that order so that whatever the wrapping attaches sees the module's final tensors
  // and an FSDP unit gathers around a checkpointed forward. Runs before configure_optimizers.
  // [collective]
  void setup_module(torch::nn::Module& module);
  // The modules whose forwards run checkpointed (nn/activation_checkpointing_policy.h) from the
  // next setup_module on, until teardown; nullopt: none. Strategies set it from their
  // `activation_checkpointing=<types>` option; a program may pass a predicate instead.
  void set_activation_checkpointing(std::optional<ModuleSelector> selector);
  const std::optional<ModuleSelector>& activation_checkpointing() const { return checkpointing_policy_; }
  // The end of a run (the Trainer's, successful or not; the Fabric's unwrap_module): what the
  // activation checkpointing policy attached to the module is removed, so that it is as it was
  // built. teardown does it too.
  void detach_policies();
  // The optimizers the loop steps: the given ones, or wrappers around them. [collective]
  virtual std::vector<std::shared_ptr<torch::optim::Optimizer>> setup_optimizers(
      std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers) {
    return optimizers;
  }
  // Ends the run's hold on the module: what setup_module attached is removed. An override calls
  // its base's after its own.
  virtual void teardown();
  // A run ended without error: the module goes back to the user whole (a strategy that sharded
  // its parameters gathers them). [collective for strategies that shard]
  virtual void restore_module(torch::nn::Module& module) {}
  // The run is failing with `error` on this rank; distributed strategies tell the other ranks.
  virtual void on_exception(const std::exception& error) {}

  // ---- one training step, composed of the parts
  // Runs `step` on `module` (the one given to setup_module) inside placement().forward_context.
  virtual torch::Tensor run_step(RunningStage stage, torch::nn::Module& module, const Batch& batch,
                                 const StepFunction& step);
  // The region run_step runs a forward in, for loops that call the forward themselves (the
  // Fabric's FabricModule). Hold it for exactly one forward.
  ScopeGuard forward_scope(RunningStage stage) { return placement_->forward_context(stage); }
  // gradients().pre_backward → precision().backward → gradients().post_backward. After the first,
  // an activation checkpointing policy that no forward reached is an error (check_reached).
  virtual void backward(const torch::Tensor& loss);
  // Unscales, runs `before_step` (the Trainer's hooks and clipping), then steps through the
  // precision; returns whether the step was taken (false when the GradScaler skipped it).
  virtual bool optimizer_step(torch::optim::Optimizer& optimizer,
                              const std::function<void(torch::optim::Optimizer&)>& before_step);
  // After all optimizers of a window stepped (`global_step` windows so far): the precision's
  // update, then whatever the strategy does per step (model averaging). [collective for such]
  virtual void after_optimizer_steps(int64_t global_step);
  // Clipping at the gradients' true scale: unscales first (once per step), then gradients().
  // Returns the norm before clipping, a 0-dim tensor not read on the host.
  torch::Tensor clip_gradients_norm(torch::optim::Optimizer& optimizer, double max_norm, double norm_type = 2.0);
  void clip_gradients_value(torch::optim::Optimizer& optimizer, double clip_value);

  // ---- checkpoint files, in checkpointing().layout() (checkpoint_files.h); `in_background`:
  // from a snapshot, on a thread (Note [Checkpoints written in the background]). Each call first
  // finishes a write still in flight, as does finish_checkpoint_writes.
  void save_checkpoint(const StateDict& checkpoint, const std::filesystem::path& path,
                       bool in_background = false);  // [collective]
  // [collective with a write in flight, and for a strategy whose layout is Sharded: the ranks
  // agree how they read a sharded directory and that its shards are of one save]
  LoadedCheckpoint load_checkpoint(const std::filesystem::path& path) const;
  void remove_checkpoint(const std::filesystem::path& path);  // [collective]
  void finish_checkpoint_writes() const;  // [collective]

  // Numbers published beside the training metrics: the precision's (the loss scale) and the
  // strategy's own (an override adds to this one's). The fit loop logs them every logged step.
  virtual std::map<std::string, double> metrics() const;

 protected:
  // Refuses, with a ConfigurationError at Trainer construction, a precision this strategy's
  // options cannot work with.
  virtual void check_precision(const Precision& precision) const {}
  // The modules the activation checkpointing policy wrapped during this run; null outside one.
  const CheckpointedModules* checkpointed_modules() const { return checkpointed_.get(); }
  // What check_capturable refuses for every strategy a graph can hold: an activation checkpointing
  // policy (its recompute sets the random generators' states from the host in the backward).
  void check_checkpointing_capturable() const;
  // What setup_module does once the module has its final dtype and device; nothing by default.
  virtual void wrap_module(torch::nn::Module& module) {}
  // Replaces a part (constructors and setup_environment; never during a step).
  void hold(std::shared_ptr<StrategyCollectives> part);
  void hold(std::shared_ptr<GradientSynchronization> part);
  void hold(std::shared_ptr<Placement> part);
  void hold(std::shared_ptr<CheckpointState> part);
  void hold(std::shared_ptr<OptimizerSharding> part);

 private:
  StrategyEnvironment environment_;
  std::shared_ptr<StrategyCollectives> collectives_;
  std::shared_ptr<GradientSynchronization> gradients_;
  std::shared_ptr<Placement> placement_;
  std::shared_ptr<CheckpointState> checkpointing_;
  std::shared_ptr<OptimizerSharding> optimizer_sharding_;  // null: whole optimizers on every rank
  std::shared_ptr<Precision> precision_;
  std::shared_ptr<CheckpointIO> checkpoint_io_;
  std::optional<ModuleSelector> checkpointing_policy_;
  std::unique_ptr<CheckpointedModules> checkpointed_;  // setup_module to teardown
  bool checkpointing_checked_ = false;
  // Last: destroyed (its thread joined) before anything the thread uses.
  std::unique_ptr<BackgroundCheckpointWrite> background_write_;
};

}  // namespace volt

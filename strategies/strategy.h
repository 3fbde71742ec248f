#pragma once
// The Strategy decides where parameters, gradients and optimizer state live across processes and
// how they are kept in agreement. The Trainer owns the loop and asks its Strategy for everything
// that involves other ranks, devices or dtypes; it never calls a collective, converts a dtype or
// moves a batch itself (docs/architecture.md).
//
// The interface is split along its seams, each in its own header:
//   strategy_collectives.h    who am I; the collectives the Trainer and callbacks use
//   strategy_checkpointing.h  checkpoint state (model, optimizers, open window, strategy section)
//   strategy.h (this)         lifecycle, data placement and the training step
//
// Contract, in the order the Trainer calls it:
//   setup_environment()  process group and devices                                [collective]
//   setup_module()       through the precision, to the device, then wrapped        [collective]
//                        (broadcast, reducer, shards: wrap_module)
//   setup_optimizers()   the user's optimizers (built after setup_module), possibly wrapped
//   distribute_loader()  each loader with the sampler this strategy needs
//   per micro-batch:     batch_to_device(); no_sync() scope unless it is the window's last
//                        micro-batch; run_step() (the forward); backward()
//   per window:          optimizer_step() for each optimizer, then after_optimizer_steps()
//   restore_module()     after a run that ended without error                      [collective]
//   teardown()
// A Strategy is used by one Trainer on one thread; it is not thread-safe.
#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/run_stage.h"
#include "core/scope_guard.h"
#include "data/batch.h"
#include "data/data_loader.h"
#include "distributed/cluster/cluster_environment.h"
#include "precision/precision.h"
#include "strategies/strategy_checkpointing.h"

namespace volt {

class ProcessLauncher;

// What the Trainer resolved from its options before the strategy sets up.
struct StrategyEnvironment {
  torch::Device device = torch::kCPU;           // the device this process computes on
  int64_t devices = 1;                          // processes per node the user asked for
  int64_t num_nodes = 1;
  std::chrono::milliseconds timeout{1800000};   // bound on every collective
  // Who started the processes and where they meet (set by the Trainer; distributed strategies
  // read their topology and rendezvous from it).
  std::shared_ptr<const ClusterEnvironment> cluster;
  // Starts the other local ranks when the cluster environment says this process must (volt's
  // own launcher); owned by whoever started the run (run_main or the Trainer), which outlives
  // the strategy's use of it. Null when nobody can launch.
  ProcessLauncher* launcher = nullptr;
};

// One step's forward: the module's training/validation/test/predict step on `batch`. The strategy
// runs it (run_step) on the module it set up, inside its forward context; a strategy that splits a
// batch over several devices calls it once per replica and chunk.
using StepFunction = std::function<torch::Tensor(torch::nn::Module& module, const Batch& batch)>;

class Strategy : public StrategyCheckpointing {
 public:
  virtual std::string name() const = 0;
  // Whether this strategy can run several processes (a ParallelStrategy). The Trainer refuses a
  // non-distributed strategy when the cluster environment has more than one process.
  virtual bool is_distributed() const { return false; }
  // Refuses, with a ConfigurationError at Trainer construction, a number of processes this
  // strategy's options cannot work with (e.g. a subgroup size that does not divide it).
  virtual void check_world_size(int64_t world_size) const {}

  // ---- lifecycle
  virtual void setup_environment(const StrategyEnvironment& environment);  // [collective]
  // Converts the module through the precision (a *-true precision's dtype), moves it to
  // root_device(), then wraps it (wrap_module: broadcast, reducer, shards). In that order, so that
  // whatever the wrapping attaches (autograd hooks on gradient accumulators, flat parameters) sees
  // the module's final tensors: converting afterwards would replace them. Runs before
  // configure_optimizers, so that optimizers see the parameters as the strategy laid them out.
  // [collective]
  void setup_module(torch::nn::Module& module);
  // Returns the optimizers the loop steps: the given ones, or wrappers around them (e.g. a
  // sharded optimizer). [collective]
  virtual std::vector<std::shared_ptr<torch::optim::Optimizer>> setup_optimizers(
      std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers) {
    return optimizers;
  }
  virtual void teardown() {}
  // A run (fit, validate, test, predict) ended without error: the module goes back to the user
  // whole, as they built it (a strategy that sharded its parameters gathers them into the
  // module's own tensors), so that saving or using it after the run sees every weight. The next
  // run's setup_module prepares it again. Nothing by default. [collective for strategies that shard]
  virtual void restore_module(torch::nn::Module& module) {}
  // The run is failing with `error` on this rank (called by the Trainer before it rethrows).
  // Distributed strategies tell the other ranks why, so their errors can name this one.
  virtual void on_exception(const std::exception& error) {}

  // Holds `precision` and installs all_reduce(·, Max) as its found-inf reducer, so that a skipped
  // AMP step is skipped on every rank. That reducer calls this strategy, which must therefore
  // outlive the precision's use.
  void set_precision(std::shared_ptr<Precision> precision);
  Precision& precision() const;
  torch::Device root_device() const override { return environment_.device; }

  // ---- data
  // The loader this rank draws `stage`'s batches from: `loader` itself on one process; otherwise
  // a copy with this rank's sampler (the user's loader is never changed). Training gets
  // DistributedSampler's equal, padded shares. Evaluation gets an unpadded split, so that every
  // sample counts once in the metrics, unless evaluation_needs_equal_steps(): then padded
  // shares, sequential, so that every rank runs the same number of steps (a sharded strategy's
  // forward has collectives); up to world_size - 1 samples then count twice, as in PyTorch's.
  virtual std::shared_ptr<DataLoader> distribute_loader(std::shared_ptr<DataLoader> loader, RunningStage stage) const;
  // The batch on root_device(), its floating-point tensors in the precision's input dtype.
  virtual Batch batch_to_device(const Batch& batch) const;

  // ---- one training step
  // Micro-batches inside this scope accumulate gradients locally without synchronizing.
  virtual ScopeGuard no_sync() { return {}; }
  // An accumulation window whose earlier micro-batches ran backward under no_sync() closed with a
  // micro-batch that ran none (training_step returned no loss), so the synchronization a strategy
  // does in backward never happened: synchronize the accumulated gradients now, before the step
  // (Note [A window that closes without backward]). One process: nothing to do. [collective]
  virtual void synchronize_accumulated_gradients(torch::nn::Module& module) {}
  // Runs one step's forward of `stage` on `module` (the one given to setup_module) inside
  // forward_context(stage), and returns what the step returns.
  virtual torch::Tensor run_step(RunningStage stage, torch::nn::Module& module, const Batch& batch,
                                 const StepFunction& step);
  // The region run_step runs a forward in, for loops that call the module's forward themselves
  // (the Fabric's FabricModule): the precision's autocast plus the strategy's pre-forward work
  // (DDP's buffer broadcast: a collective in training). Hold it for exactly one forward.
  ScopeGuard forward_scope(RunningStage stage) { return forward_context(stage); }
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
  // Clips the gradients of `optimizer`'s parameters at their true scale: unscales them first (the
  // precision does it once per step, so inside optimizer_step's before_step, where the Trainer
  // clips, this is free; a manual or own loop clips before the step). A sharded strategy computes
  // the global norm. Returns the total norm before clipping (clip_gradients_norm) or nothing (by value).
  virtual double clip_gradients_norm(torch::optim::Optimizer& optimizer, double max_norm,
                                     double norm_type = 2.0);
  virtual void clip_gradients_value(torch::optim::Optimizer& optimizer, double clip_value);

  // Numbers the strategy publishes beside the training metrics: its precision's (the loss scale)
  // and its own (e.g. bytes communicated; an override adds to this one's). The fit loop logs them
  // with every logged step.
  virtual std::map<std::string, double> metrics() const;

 protected:
  // Refuses, with a ConfigurationError at Trainer construction, a precision this strategy's
  // options cannot work with (e.g. gradient compression of gradients already in 16 bits).
  virtual void check_precision(const Precision& precision) const {}
  // What setup_module does once the module has its final dtype and device; nothing by default.
  virtual void wrap_module(torch::nn::Module& module) {}
  // The region in which a step of `stage` runs its forward (the precision's autocast, plus a
  // strategy's pre-forward work such as DDP's buffer broadcast).
  virtual ScopeGuard forward_context(RunningStage stage);
  // Whether evaluation steps run collectives, so that every rank must run as many of them
  // (distribute_loader).
  virtual bool evaluation_needs_equal_steps() const { return false; }
  virtual void pre_backward(const torch::Tensor& loss) {}
  virtual void post_backward(const torch::Tensor& loss) {}
  const StrategyEnvironment& environment() const { return environment_; }

 private:
  StrategyEnvironment environment_;
  std::shared_ptr<Precision> precision_;
};

}  // namespace volt

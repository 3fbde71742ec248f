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
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "strategies/reduce_op.h"
#include "trainer/cluster/cluster_environment.h"
#include "trainer/module.h"
#include "trainer/precision/precision.h"
#include "trainer/scope_guard.h"
#include "trainer/state_dict.h"
#include "trainer/trainer_state.h"

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

 protected:
  virtual void pre_backward(const torch::Tensor& loss) {}
  virtual void post_backward(const torch::Tensor& loss) {}
  const StrategyEnvironment& environment() const { return environment_; }

 private:
  StrategyEnvironment environment_;
  std::shared_ptr<Precision> precision_;
};

}  // namespace volt

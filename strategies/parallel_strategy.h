#pragma once
// The base of every strategy that runs several processes (DDP, sharded, FSDP, SlowMo build on it).
// It owns the process group: setup_environment() starts the other local ranks when this process
// must (through the ProcessLauncher in its StrategyEnvironment) and joins the group through the
// cluster environment's rendezvous; the Trainer's collectives (metric reduction, decisions, barrier) go through its
// Communicator, whose counters it publishes as metrics ("comm/bytes", "comm/step_bytes", ...).
//
// Subclasses add the gradient synchronization (pre_backward / post_backward / optimizer_step)
// and call the base versions of the methods they override.
// Not thread-safe (one Trainer, one thread), like every Strategy.
#include <memory>

#include "distributed/cluster/cluster_environment.h"
#include "distributed/communicator.h"
#include "strategies/strategy.h"

namespace volt {

class ParallelStrategy : public Strategy {
 public:
  bool is_distributed() const override { return true; }

  // Starts/joins the process group. [collective]
  void setup_environment(const StrategyEnvironment& environment) override;
  void after_optimizer_steps(int64_t global_step) override;
  void teardown() override;
  // Records the error for the other ranks (Note [Naming the failed rank]) unless it is itself
  // a DistributedError, i.e. this rank is failing because of another one.
  void on_exception(const std::exception& error) override;

  ProcessTopology topology() const override;

  torch::Tensor all_reduce(const torch::Tensor& value, ReduceOp op) override;      // [collective]
  torch::Tensor broadcast(const torch::Tensor& value, int64_t root = 0) override;  // [collective]
  bool broadcast_decision(bool decision) override;                                 // [collective]
  bool reduce_boolean_decision(bool decision, bool all = true) override;           // [collective]
  void barrier(const std::string& name = "") override;                             // [collective]
  std::vector<StateDict> gather_states(const StateDict& mine, int64_t root = 0) override;  // [collective]

  // Communication so far: "comm/<kind>_calls", "comm/<kind>_bytes", "comm/calls", "comm/bytes"
  // (payload bytes since setup, every collective of this process's root communicator, the
  // Trainer's metric reductions included) and "comm/step_bytes" (the payload of the last
  // optimizer step: from the end of the previous step to the end of this one).
  std::map<std::string, double> metrics() const override;
  // Averages every trainable parameter's gradient across ranks (one all_reduce per dtype, plus
  // one that tells which parameters have a gradient on some rank: those get one everywhere, the
  // others stay without). [collective]
  void synchronize_accumulated_gradients(torch::nn::Module& module) override;

  // The root communicator; throws InternalError before setup_environment().
  Communicator& communicator() const;
  const ClusterEnvironment& cluster() const;

 protected:
  // Makes every rank start from rank 0's parameters and buffers (after checking that every rank
  // built the same model). [collective]
  void wrap_module(torch::nn::Module& module) override;
  // Broadcasts every parameter and buffer of `module` from rank 0, in registration order.
  // [collective]
  void broadcast_module_state(torch::nn::Module& module);
  // Rank 0's buffers (e.g. BatchNorm statistics) into every rank's, one flat broadcast per dtype:
  // DDP's broadcast_buffers before each training forward. [collective]
  void broadcast_module_buffers(torch::nn::Module& module);

 private:
  std::shared_ptr<const ClusterEnvironment> cluster_;
  std::shared_ptr<Communicator> communicator_;
  CollectiveCounters at_last_step_;
  CollectiveCounters last_step_;
};

}  // namespace volt

#pragma once
// The base of every strategy that runs several processes (DDP, sharded, FSDP, SlowMo build on it).
// It owns the process group: setup_environment() starts the other local ranks when this process
// must (through the ProcessLauncher in its StrategyEnvironment) and joins the group through the
// cluster environment's rendezvous; its collectives part (communicator_collectives.h: metric
// reduction, decisions, barrier) goes through its Communicator, whose counters it publishes as metrics ("comm/bytes",
// "comm/step_bytes", ...). A strategy that works within process subgroups (post-local-SGD, SlowMo) builds the run's
// Topology here (build_topology), so that every such strategy shares one and its groups' counters are published beside
// the world's.
//
// Its gradients part averages accumulated gradients over gradient_group()
// (averaging_gradient_synchronization.h); subclasses hold their own synchronization (a reducer,
// FSDP's units) and call the base versions of the lifecycle methods they override.
// Not thread-safe (one Trainer, one thread), like every Strategy.
#include <map>
#include <memory>
#include <optional>

#include "distributed/cluster/cluster_environment.h"
#include "distributed/communicator.h"
#include "distributed/topology.h"
#include "strategies/strategy.h"

namespace volt {

class ParallelStrategy : public Strategy, public ProcessGroupContext {
 public:
  bool is_distributed() const override { return true; }

  // Starts/joins the process group. [collective]
  void setup_environment(const StrategyEnvironment& environment) override;
  // The precision's update (Strategy), then synchronize_models(), then the step's counters close,
  // so that a step's model averaging counts toward that step's bytes. [collective where
  // synchronize_models is]
  void after_optimizer_steps(int64_t global_step) override;
  void teardown() override;
  // Records the error for the other ranks (Note [Naming the failed rank]) unless it is itself
  // a DistributedError, i.e. this rank is failing because of another one.
  void on_exception(const std::exception& error) override;

  ParallelStrategy();

  // The cluster's topology once setup_environment ran (one process of one before).
  ProcessTopology cluster_topology() const override;

  // Communication so far: "comm/<kind>_calls", "comm/<kind>_bytes", "comm/calls", "comm/bytes"
  // (payload bytes since setup, every collective of this process's root communicator, i.e. over
  // the whole world, the Trainer's metric reductions included) and "comm/step_bytes" (the payload
  // of the last optimizer step: from the end of the previous step to the end of this one). With a
  // Topology, the same for each of its groups this process is in (Topology::groups):
  // "comm/<group>/calls", "comm/<group>/bytes", "comm/<group>/step_bytes", e.g. "comm/node/bytes"
  // for the bytes within this node (or simulated node).
  std::map<std::string, double> metrics() const override;

  // The root communicator; throws InternalError before setup_environment().
  Communicator& communicator() const override;
  const ClusterEnvironment& cluster() const;

  // Builds the run's Topology over the root communicator: node groups of `node_size` consecutive
  // ranks, or the cluster's nodes when unset (distributed/topology.h). Once per run; a second call
  // returns the same topology when it asks for the same node size and throws ConfigurationError
  // otherwise. [collective on the first call]
  Topology& build_topology(std::optional<int64_t> node_size = std::nullopt);
  // Throws InternalError before build_topology().
  Topology& node_topology() const;

  // The ranks whose gradients are averaged every step: the world; SlowMo: this process's node.
  // [collective the first time for a strategy that builds its topology here]
  Communicator& gradient_group() override { return communicator(); }

 protected:
  // Makes every rank start from rank 0's parameters and buffers (after checking that every rank
  // built the same model). [collective]
  void wrap_module(torch::nn::Module& module) override;
  // The root communicator, for what shares its ownership (a ProcessMesh over the world); null
  // before setup_environment.
  std::shared_ptr<Communicator> shared_communicator() const { return communicator_; }
  // Broadcasts every parameter and buffer of `module` from rank 0, in registration order.
  // [collective]
  void broadcast_module_state(torch::nn::Module& module);
  // Where strategies that average models periodically (post-local-SGD, SlowMo) do it: after every
  // optimizer of the window stepped (global_step counts windows so far) and the precision updated.
  // Nothing by default. [collective for such strategies]
  virtual void synchronize_models(int64_t global_step) {}

 private:
  // A communicator's counters at the end of the previous step, and the last step's difference.
  struct StepCounters {
    CollectiveCounters at_last_step;
    CollectiveCounters last_step;
    void close_step(const CollectiveCounters& now);
  };

  std::shared_ptr<const ClusterEnvironment> cluster_;
  std::shared_ptr<Communicator> communicator_;
  std::unique_ptr<Topology> topology_;
  std::optional<int64_t> topology_node_size_;
  StepCounters world_counters_;
  std::map<std::string, StepCounters> group_counters_;  // by Topology::groups() name
};

}  // namespace volt

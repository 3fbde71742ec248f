#pragma once
// SlowMo (Wang et al., ICLR 2020; fairscale's SlowMoDistributedDataParallel with the local-SGD base
// algorithm): `--strategy slowmo[:key=value,...]`, see SlowMoOptions. For clusters whose nodes are
// joined by a slow network: gradients are averaged only within each node, every step; the models are
// averaged across nodes every localsgd_frequency steps, and every slowmo_frequency steps a slow
// momentum step follows (strategies/averaging/slow_momentum_averager.h has the formula).
//
// Composition (docs/architecture.md): DDPStrategy with its Reducer on the node group of the run's
// Topology (gradient_group), so bucketing, overlap with backward and no_sync for accumulation are
// DDP's, plus the SlowMomentumAverager that DDP runs after every window's optimizer steps. The
// Trainer calls it (after_optimizer_steps); fairscale's user calls perform_slowmo by hand.
//
// Nodes: the cluster's (its processes per node) unless nprocs_per_node is given, which then makes
// groups of that many consecutive ranks (several "nodes" on one machine). One node: local SGD is
// off (the node group averages every step), with a warning, as in fairscale.
//
// Checkpoints: DDP's, with the averager's state (step, x_old and u, every rank's shard) and every
// rank's model and optimizer state (nodes hold different models between averages).
// Not thread-safe (one Trainer, one thread).
#include <optional>

#include "core/option_schema.h"
#include "core/registry.h"
#include "strategies/averaging/slow_momentum_averager.h"
#include "strategies/ddp/ddp_strategy.h"

namespace volt {

struct SlowMoOptions {
  double slowmo_momentum = 0.5;          // β
  double slowmo_lr = 1.0;                // α
  int64_t slowmo_frequency = 48;         // optimizer steps between slow momentum steps
  int64_t localsgd_frequency = 3;        // optimizer steps between averages across nodes
  std::optional<int64_t> nprocs_per_node;  // unset: the cluster's processes per node
  bool memory_efficient = true;          // shard x_old and u across ranks
  int64_t num_shards = 32;               // shards when memory_efficient (at most the world size)
  bool broadcast_buffers = true;         // rank 0's buffers before every training forward (world)
  double bucket_cap_mb = 25.0;           // DDP's reducer within the node
  bool find_unused_parameters = false;   // DDP's reducer within the node

  static const OptionSchema<SlowMoOptions>& schema();
  void validate() const;
  averaging::SlowMomentumOptions averaging() const;
  // What the node group's DDP runs with.
  DDPOptions ddp() const;
};

class SlowMoStrategy : public DDPStrategy {
 public:
  explicit SlowMoStrategy(SlowMoOptions options = {});
  std::string name() const override { return "slowmo"; }
  const SlowMoOptions& slowmo_options() const { return options_; }

  // nprocs_per_node must divide the world size.
  void check_world_size(int64_t world_size) const override;
  // Checks the parameters for the slow momentum buffers before the first step.
  bool optimizer_step(torch::optim::Optimizer& optimizer,
                      const std::function<void(torch::optim::Optimizer&)>& before_step) override;
  void teardown() override;
  // DDP's, plus "slowmo/buffer_bytes": the bytes of x_old and u this rank holds.
  std::map<std::string, double> metrics() const override;

  // Throws InternalError before setup_module.
  averaging::SlowMomentumAverager& averager() const;

 protected:
  // This process's node group (builds the topology). [collective the first time]
  Communicator& gradient_group() override;
  // DDP's wrapping on the node group, then the averager. [collective]
  void wrap_module(torch::nn::Module& module) override;
  // The slow momentum buffers in 16 bits (16-true, bf16-true) are refused.
  void check_precision(const Precision& precision) const override;

 private:
  // The current learning rate of every reducer parameter (1 for one no optimizer steps: it never
  // moves locally, so its momentum stays zero whatever the rate).
  std::vector<double> learning_rates() const;

  SlowMoOptions options_;
  averaging::SlowMomentumAverager* averager_ = nullptr;  // owned by DDPStrategy
};

// Registers `slowmo` (strategy_registry.cpp).
void register_slowmo_strategy(Registry<Strategy>& registry);

}  // namespace volt

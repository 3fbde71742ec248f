#pragma once
// Note [Part context]: what a part of a strategy (gradient_synchronization.h, placement.h,
// checkpoint_state.h, and the collectives of a ParallelStrategy) may ask of the strategy that holds
// it, handed to it at construction in place of the strategy itself. It gets the strategy's name,
// topology and device, and the collectives, precision and communicators to act through; it
// cannot set up, wrap, step or load the strategy, nor replace a part, so a part
// decides only what it owns and the lifecycle stays the strategy's. The strategy implements these
// interfaces, so what they return has one owner and is current (the topology and device exist
// after setup_environment, the precision after set_precision): a part reads them when it acts,
// never in its constructor.
//
// No part holds its strategy. A strategy's own derived parts get, besides, the narrow thing they
// act on: DDP's checkpoint section a DDPSectionContext (its reducer, model averager and local
// model), FSDP's three parts the FSDPState that owns the units (Note [FSDP's state]),
// ShardedDDP's gradients the ShardedReducer it is attached to.
#include <torch/torch.h>

#include <string>

#include "distributed/process_topology.h"

namespace volt {

class Communicator;
class OptimizerSharding;
class Precision;
class StrategyCollectives;

class PartContext {
 public:
  // The strategy's name, for messages.
  virtual std::string name() const = 0;
  // Who this process is; one process of one before setup_environment.
  virtual ProcessTopology topology() const = 0;
  // The other ranks, as the collectives part reaches them.
  virtual StrategyCollectives& collectives() const = 0;
  virtual Precision& precision() const = 0;
  // The device this process computes on.
  virtual torch::Device root_device() const = 0;
  // Null unless the strategy shards optimizer state (optimizer_sharding.h).
  virtual const OptimizerSharding* optimizer_sharding() const = 0;

 protected:
  ~PartContext() = default;
};

// What the parts of a strategy of several processes reach besides (parallel_strategy.h).
class ProcessGroupContext {
 public:
  // The root communicator (every rank); throws InternalError before setup_environment.
  virtual Communicator& communicator() const = 0;
  // The cluster's topology once setup_environment ran (one process of one before).
  virtual ProcessTopology cluster_topology() const = 0;
  // The ranks whose gradients are averaged every step. [collective the first time for a strategy
  // that builds its topology then]
  virtual Communicator& gradient_group() = 0;

 protected:
  ~ProcessGroupContext() = default;
};

}  // namespace volt

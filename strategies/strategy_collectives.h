#pragma once
// A part of the Strategy (strategy.h), and all that callbacks need of it: who this process is
// among the run's processes, and the collectives the Trainer, its loops and callbacks use:
// reducing a logged metric, agreeing on a decision (stop, save), a barrier. On one process every
// collective is the identity; a distributed strategy holds one over its Communicator
// (communicator_collectives.h).
//
// Every method marked [collective] must be called by every rank at the same point.
#include <torch/torch.h>

#include <source_location>
#include <string>
#include <vector>

#include "core/state_dict.h"
#include "distributed/process_topology.h"
#include "distributed/reduce_op.h"

namespace volt {

class StrategyCollectives {
 public:
  virtual ~StrategyCollectives() = default;

  virtual ProcessTopology topology() const { return {}; }
  bool is_global_zero() const { return topology().global_rank == 0; }
  // Where tensors handed to a collective must live (the communicator's device).
  virtual torch::Device root_device() const { return torch::kCPU; }

  virtual torch::Tensor all_reduce(const torch::Tensor& value, ReduceOp op) { return value; }  // [collective]
  // `root`'s value, on every rank. [collective]
  virtual torch::Tensor broadcast(const torch::Tensor& value, int64_t root = 0) { return value; }
  // `root`'s number, on every rank (a logger's version, a save's id). [collective]
  int64_t broadcast_int(int64_t value, int64_t root = 0) {
    if (topology().world_size == 1) return value;
    return broadcast(torch::tensor({value}, torch::kLong).to(root_device()), root).cpu().item<int64_t>();
  }
  // Rank 0's decision, on every rank (stopping, checkpointing). `site`: where it is taken; ranks
  // at different decisions fail (Note [Which decision], decision_site.h). [collective]
  virtual bool broadcast_decision(bool decision, std::source_location site = std::source_location::current()) {
    return decision;
  }
  // `all`: true iff every rank decided true; otherwise true iff any did. `site` as above.
  // [collective]
  virtual bool reduce_boolean_decision(bool decision, bool all = true,
                                       std::source_location site = std::source_location::current()) {
    return decision;
  }
  virtual void barrier(const std::string& name = "") {}  // [collective]
  // Every rank's `mine`, by rank, on `root` (the other ranks get an empty vector): per-rank state
  // for a checkpoint one rank writes (a comm hook's error feedback, a sharded optimizer's shard).
  // [collective]
  virtual std::vector<StateDict> gather_states(const StateDict& mine, int64_t root = 0) { return {mine}; }
};

}  // namespace volt

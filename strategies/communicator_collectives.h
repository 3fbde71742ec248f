#pragma once
// The collectives part (strategy_collectives.h) of every ParallelStrategy: over its root
// Communicator, the whole world. Decisions carry where they were taken, so that ranks at
// different decisions fail instead of pairing (Note [Which decision], decision_site.h).
#include "strategies/part_context.h"
#include "strategies/strategy_collectives.h"

namespace volt {


class CommunicatorCollectives : public StrategyCollectives {
 public:
  // The strategy that holds this part and outlives it (Note [Part context]); its communicator
  // exists from setup_environment on.
  CommunicatorCollectives(const PartContext& context, const ProcessGroupContext& group)
      : context_(context), group_(group) {}

  ProcessTopology topology() const override;
  torch::Device root_device() const override;
  torch::Tensor all_reduce(const torch::Tensor& value, ReduceOp op) override;      // [collective]
  torch::Tensor broadcast(const torch::Tensor& value, int64_t root = 0) override;  // [collective]
  bool broadcast_decision(bool decision,
                          std::source_location site = std::source_location::current()) override;  // [collective]
  bool reduce_boolean_decision(bool decision, bool all = true,
                               std::source_location site = std::source_location::current()) override;  // [collective]
  void barrier(const std::string& name = "") override;                                    // [collective]
  std::vector<StateDict> gather_states(const StateDict& mine, int64_t root = 0) override;  // [collective]

 private:
  const PartContext& context_;
  const ProcessGroupContext& group_;
};

}  // namespace volt

#pragma once
// Optimizer surgery for FSDP: the user's optimizers were built over the module's parameters
// (configure_optimizers runs after setup_module), but FSDP steps each unit's flat shard. Each
// param group's parameters of a unit are replaced by that unit's shard (per parameter, Note
// [Per-parameter layout]: each parameter by its own shard, in its place), and what was where is
// kept (GroupLayout) so that a Full checkpoint writes the optimizer state in PyTorch's layout over
// the original parameters (flat_optimizer_state.h).
#include <torch/torch.h>

#include <map>
#include <memory>
#include <vector>

#include "strategies/fsdp/flat_optimizer_state.h"
#include "strategies/fsdp/fully_sharded_unit.h"

namespace volt::fsdp {

using OptimizerLayouts = std::map<const torch::optim::Optimizer*, std::vector<GroupLayout>>;

// Replaces, in every param group of `optimizers`, the parameters of each of `sharded` by its
// shard (a parameter outside them stays as it is); returns each optimizer's original layout.
// Throws ConfigurationError when a flat layout's parameters are split over param groups or
// optimizers, a parameter is in two, or an optimizer already has state. `strategy` names the
// strategy in errors.
OptimizerLayouts replace_parameters_by_shards(const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers,
                                              const std::vector<ShardedParameters>& sharded,
                                              const std::string& strategy = "fsdp");
// The same for fsdp's units.
OptimizerLayouts replace_parameters_by_shards(const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers,
                                              const std::vector<std::shared_ptr<FullyShardedUnit>>& units);

}  // namespace volt::fsdp

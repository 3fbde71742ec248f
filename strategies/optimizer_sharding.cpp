#include "strategies/optimizer_sharding.h"

#include "core/error.h"
#include "strategies/sharded_optimizer.h"

namespace volt {

StateDict OptimizerSharding::state_dict(torch::optim::Optimizer& optimizer, CheckpointLayout layout) const {
  auto& optimizer_shards = sharded(optimizer);
  return layout == CheckpointLayout::Full ? optimizer_shards.consolidated_state_dict(0)
                                          : optimizer_shards.shard_state_dict();
}

void OptimizerSharding::load_state_dict(torch::optim::Optimizer& optimizer, const StateDict& state,
                                        const std::string& what, const ParameterNamer& name_of) const {
  sharded(optimizer).load_sharded_or_consolidated_state_dict(state, what, name_of);
}

torch::Tensor OptimizerSharding::clip_norm(torch::optim::Optimizer& optimizer, double max_norm,
                                           double norm_type) const {
  return sharded(optimizer).clip_grad_norm(max_norm, norm_type);
}

ShardedOptimizer& OptimizerSharding::sharded(torch::optim::Optimizer& optimizer) const {
  auto* shards = dynamic_cast<ShardedOptimizer*>(&optimizer);
  check<ConfigurationError>(shards != nullptr, strategy_, " shards optimizer state, but this optimizer was not set up "
                            "by it; pass the optimizers its setup_optimizers returned (trainer.optimizers(), "
                            "fabric.setup_optimizers)");
  return *shards;
}

}  // namespace volt

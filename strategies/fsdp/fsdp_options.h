#pragma once
// The options of `--strategy fsdp[:key=value,...]` (fsdp_strategy.h), with their schema.
#include <optional>

#include "checkpoint/checkpoint_layout.h"
#include "core/option_schema.h"

namespace volt {

// Lightning's (and PyTorch's) names of the sharding settings: FULL_SHARD (reshard_after_forward),
// SHARD_GRAD_OP (no resharding) and NO_SHARD (Note [NO_SHARD]).
enum class ShardingStrategy { FullShard, ShardGradOp, NoShard };

struct FSDPOptions {
  int64_t min_num_params = 100000000;  // auto-wrap threshold (fairscale's default 1e8); 0: root unit only
  std::optional<bool> reshard_after_forward;  // default true (FULL_SHARD)
  std::optional<ShardingStrategy> sharding_strategy;  // unset: FULL_SHARD or SHARD_GRAD_OP by the above
  bool mixed_precision = false;        // gather, compute and reduce in the precision's 16-bit dtype
  bool fp32_reduce_scatter = false;    // with mixed_precision: reduce-scatter gradients in float32
  double bucket_cap_mb = 25;           // units' gradients below it share reduce-scatters; 0: each alone
  bool forward_prefetch = false;       // all-gather the next unit while a unit's forward runs
  bool backward_prefetch = false;      // all-gather the previous unit while a unit's backward runs
  CheckpointLayout state_dict_type = CheckpointLayout::Full;
  bool cpu_offload = false;  // shards, their gradients and the optimizer step in host memory (CUDA only)

  static const OptionSchema<FSDPOptions>& schema();
  // The schema's checks, then the combinations: sharding_strategy and reshard_after_forward must
  // agree (NO_SHARD takes none), fp32_reduce_scatter needs mixed_precision.
  void validate() const;
  bool resharding() const;  // reshard_after_forward as set or implied
  bool sharded() const { return sharding_strategy != ShardingStrategy::NoShard; }
};

}  // namespace volt

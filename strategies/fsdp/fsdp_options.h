#pragma once
// The options of `--strategy fsdp[:key=value,...]` (fsdp_strategy.h), with their schema.
#include <optional>

#include "checkpoint/checkpoint_layout.h"
#include "core/option_schema.h"
#include "strategies/fsdp/shard_layout.h"

namespace volt {

// Lightning's (and PyTorch's) names of the sharding settings: FULL_SHARD (reshard_after_forward),
// SHARD_GRAD_OP (no resharding), NO_SHARD (Note [NO_SHARD]) and HYBRID_SHARD (Note [HYBRID_SHARD]).
enum class ShardingStrategy { FullShard, ShardGradOp, NoShard, HybridShard };

// reshard_after_forward: true (a unit's gathered parameters are freed after its forward; every
// rank keeps its shard), false (kept gathered until its backward), or a group size G (FSDP2's int,
// ZeRO++'s hpZ; Note [Resharding to a group] in flat_parameter.h): after forward each rank keeps
// 1/G of the gathered parameters, so that the backward's all-gather runs within its group of G
// consecutive ranks (a node) instead of over all of them.
struct ReshardAfterForward {
  ReshardAfterForward(bool value = true) : reshard(value) {}  // NOLINT: options.reshard_after_forward = false
  static ReshardAfterForward to_group(int64_t ranks);
  bool reshard = true;
  std::optional<int64_t> group;  // with reshard: the group's size (unset: the whole shard group)
};

struct FSDPOptions {
  // Auto-wrap by size: the threshold (fairscale's default 1e8 when neither it nor wrap is given); 0:
  // the root unit only.
  std::optional<int64_t> min_num_params;
  std::string wrap;  // auto-wrap by module type (Block, or Block|MLP): each such module a unit; empty: by size
  std::optional<ReshardAfterForward> reshard_after_forward;  // default true (FULL_SHARD)
  std::optional<ShardingStrategy> sharding_strategy;  // unset: FULL_SHARD or SHARD_GRAD_OP by the above
  std::optional<int64_t> nprocs_per_node;  // HYBRID_SHARD's node size (unset: the cluster's nodes)
  bool mixed_precision = false;        // gather, compute and reduce in the precision's 16-bit dtype
  bool fp32_reduce_scatter = false;    // with mixed_precision: reduce-scatter gradients in float32
  double bucket_cap_mb = 25;           // units' gradients below it share reduce-scatters; 0: each alone
  bool forward_prefetch = false;       // all-gather the next unit while a unit's forward runs
  bool backward_prefetch = false;      // all-gather the previous unit while a unit's backward runs
  CheckpointLayout state_dict_type = CheckpointLayout::Full;
  fsdp::ShardLayout layout = fsdp::ShardLayout::Flat;  // how units are cut into shards
  bool cpu_offload = false;  // shards, their gradients and the optimizer step in host memory (CUDA only)
  std::string activation_checkpointing;  // module types whose forwards run checkpointed; empty: none

  static const OptionSchema<FSDPOptions>& schema();
  // The schema's checks, then the combinations: sharding_strategy and reshard_after_forward must
  // agree (NO_SHARD takes none), fp32_reduce_scatter needs mixed_precision, nprocs_per_node needs
  // HYBRID_SHARD, which writes full checkpoints only.
  void validate() const;
  bool resharding() const;  // reshard_after_forward as set or implied
  // reshard_after_forward's group size, when it gives one.
  std::optional<int64_t> reshard_group() const;
  // What depends on the world size: reshard_after_forward's group must divide it, smaller.
  void check_world_size(int64_t world_size) const;
  bool sharded() const { return sharding_strategy != ShardingStrategy::NoShard; }
  bool hybrid() const { return sharding_strategy == ShardingStrategy::HybridShard; }
  // Auto-wrap's size threshold: min_num_params as given, else fairscale's 1e8 (0 under wrap).
  int64_t size_threshold() const;
};

}  // namespace volt

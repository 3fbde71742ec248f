#include "strategies/fsdp/fsdp_options.h"

#include "core/error.h"
#include "strategies/shared_strategy_options.h"

namespace volt {

const OptionSchema<FSDPOptions>& FSDPOptions::schema() {
  static const auto schema =
      OptionSchema<FSDPOptions>("--strategy fsdp")
          .option("min_num_params", &FSDPOptions::min_num_params,
                  "auto-wrap: a module (a child of a Sequential) with at least this many parameters not yet in a "
                  "unit becomes a unit (default 100000000 unless wrap is given); 0: the root unit only",
                  at_least(int64_t{0}))
          .option("wrap", &FSDPOptions::wrap,
                  "auto-wrap by type: every module of these types (Block, or Block|MLP) becomes a unit, in any "
                  "container; one a Sequential does not call is called through volt::call (PyTorch's "
                  "ModuleWrapPolicy)",
                  module_types_requirement())
          .option("reshard_after_forward", &FSDPOptions::reshard_after_forward,
                  "free a unit's gathered parameters after its forward and gather them again for its backward "
                  "(default true; false keeps them until after the backward, ZeRO-2 style)")
          .choice("sharding_strategy", &FSDPOptions::sharding_strategy,
                  {{"FULL_SHARD", ShardingStrategy::FullShard},
                   {"SHARD_GRAD_OP", ShardingStrategy::ShardGradOp},
                   {"NO_SHARD", ShardingStrategy::NoShard},
                   {"HYBRID_SHARD", ShardingStrategy::HybridShard}},
                  "Lightning's names: FULL_SHARD = reshard_after_forward=true, SHARD_GRAD_OP = false, NO_SHARD = "
                  "nothing sharded, gradients all-reduced (DDP inside the units), HYBRID_SHARD = sharded within "
                  "each node, replicated across nodes (gradients reduce-scattered in the node, then all-reduced "
                  "with the other nodes' peers)")
          .with(nprocs_per_node_option(&FSDPOptions::nprocs_per_node, "with HYBRID_SHARD: "))
          .option("mixed_precision", &FSDPOptions::mixed_precision,
                  "gather parameters, compute and reduce gradients in the precision's 16-bit dtype (needs "
                  "--precision bf16-mixed on CPU, 16-mixed or bf16-mixed on CUDA); shards stay float32")
          .option("fp32_reduce_scatter", &FSDPOptions::fp32_reduce_scatter,
                  "with mixed_precision: reduce-scatter gradients in float32")
          .option("bucket_cap_mb", &FSDPOptions::bucket_cap_mb,
                  "MiB of a bucket in which units' smaller flat gradients wait to be reduce-scattered together "
                  "(fairscale's; the result is bit for bit the same); 0: each unit's alone, at once",
                  at_least(0.0), at_most(1024.0 * 1024.0))
          .option("forward_prefetch", &FSDPOptions::forward_prefetch,
                  "start the all-gather of the next unit (in the order of the first forward) before a unit's "
                  "forward runs, so that it overlaps that compute; two units are gathered at once")
          .option("backward_prefetch", &FSDPOptions::backward_prefetch,
                  "with resharding: start the all-gather of the unit whose backward comes next before a unit's "
                  "backward runs (PyTorch's BACKWARD_PRE); two units are gathered at once")
          .choice("state_dict_type", &FSDPOptions::state_dict_type,
                  {{"full", CheckpointLayout::Full}, {"sharded", CheckpointLayout::Sharded}},
                  "checkpoint layout: full (PyTorch's names and optimizer layout, gathered; any strategy and world "
                  "size loads it) or sharded (each rank's flat shards and optimizer shard)")
          .option("cpu_offload", &FSDPOptions::cpu_offload,
                  "keep each rank's parameter shards, their gradients and the optimizer step in pinned host memory "
                  "while a CUDA device computes; units are copied to the device to be gathered (PyTorch's "
                  "CPUOffload(offload_params=True), fairscale's move_params_to_cpu); needs --accelerator cuda")
          .with(activation_checkpointing_option(&FSDPOptions::activation_checkpointing))
          .validated_by_what_it_builds();  // the strategy's constructor validates (users build it from a struct too)
  return schema;
}

int64_t FSDPOptions::size_threshold() const {
  if (min_num_params) return *min_num_params;
  return wrap.empty() ? int64_t{100000000} : 0;
}

bool FSDPOptions::resharding() const {
  if (sharding_strategy && !hybrid()) return *sharding_strategy == ShardingStrategy::FullShard;
  return reshard_after_forward.value_or(true);
}

void FSDPOptions::validate() const {
  schema().validate(*this);
  check<ConfigurationError>(sharded() || !reshard_after_forward, "--strategy fsdp: sharding_strategy=NO_SHARD keeps "
                            "every parameter whole on every rank, so reshard_after_forward does not apply; drop it");
  check<ConfigurationError>(!nprocs_per_node || hybrid(), "--strategy fsdp: nprocs_per_node sizes the nodes of "
                            "sharding_strategy=HYBRID_SHARD; add it or drop nprocs_per_node");
  check<ConfigurationError>(!hybrid() || state_dict_type == CheckpointLayout::Full, "--strategy fsdp: "
                            "sharding_strategy=HYBRID_SHARD writes full checkpoints only (every node holds the same "
                            "shards); drop state_dict_type=sharded");
  check<ConfigurationError>(!sharding_strategy || hybrid() || !reshard_after_forward ||
                                *reshard_after_forward == (*sharding_strategy == ShardingStrategy::FullShard),
                            "--strategy fsdp: sharding_strategy=",
                            *sharding_strategy == ShardingStrategy::FullShard ? "FULL_SHARD" : "SHARD_GRAD_OP",
                            " means reshard_after_forward=",
                            *sharding_strategy == ShardingStrategy::FullShard ? "true" : "false",
                            ", but reshard_after_forward is set to the opposite; give one of the two");
  check<ConfigurationError>(wrap.empty() || !min_num_params, "--strategy fsdp: wrap=", wrap,
                            " and min_num_params both choose the units; give one of the two");
  check<ConfigurationError>(!fp32_reduce_scatter || mixed_precision,
                            "--strategy fsdp: fp32_reduce_scatter=true needs mixed_precision=true (without it "
                            "gradients are float32 already)");
}

}  // namespace volt

#include "strategies/fsdp/fsdp_options.h"

#include "core/error.h"
#include "core/option_spec.h"
#include "strategies/shared_strategy_options.h"

namespace volt {

ReshardAfterForward ReshardAfterForward::to_group(int64_t ranks) {
  ReshardAfterForward value(true);
  value.group = ranks;
  return value;
}

namespace {

TextForm<ReshardAfterForward> reshard_form() {
  return {"true, false or a group size of at least 2",
          [](const std::string& text) {
            // The spellings of a boolean option first (1 and 0 among them), then a group size.
            if (bool value = false; parse_bool(text, &value)) return ReshardAfterForward(value);
            size_t used = 0;
            int64_t ranks = 0;
            try {
              ranks = std::stoll(text, &used);
            } catch (const std::exception&) {
              used = 0;
            }
            check<ConfigurationError>(used == text.size() && ranks >= 2, "--strategy fsdp: reshard_after_forward "
                                      "expects true, false or a group size of at least 2 (keep 1/G of the "
                                      "parameters after forward, over groups of G consecutive ranks), got '",
                                      text, "'");
            return ReshardAfterForward::to_group(ranks);
          },
          [](const ReshardAfterForward& value) {
            return value.group ? std::to_string(*value.group) : std::string(value.reshard ? "true" : "false");
          }};
}

}  // namespace

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
          .option("reshard_after_forward", &FSDPOptions::reshard_after_forward, reshard_form(),
                  "free a unit's gathered parameters after its forward and gather them again for its backward "
                  "(default true; false keeps them until after the backward, ZeRO-2 style; a group size G keeps "
                  "1/G of them on each rank so that the backward gathers within groups of G consecutive ranks, "
                  "FSDP2's int, ZeRO++'s hpZ)")
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
                  "size loads it) or sharded (each rank's shards and optimizer shard, with an index: any strategy and "
                  "world size loads it)")
          .choice("layout", &FSDPOptions::layout,
                  {{"flat", fsdp::ShardLayout::Flat}, {"per_parameter", fsdp::ShardLayout::PerParameter}},
                  "how a unit is cut into shards: flat (its parameters flattened into one tensor, 1/N of it per "
                  "rank; frozen parameters stay whole) or per_parameter (every parameter on its first dimension, "
                  "frozen ones too; the optimizer steps one shard per parameter, FSDP2's fully_shard)")
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
  return !reshard_after_forward || reshard_after_forward->reshard;
}

std::optional<int64_t> FSDPOptions::reshard_group() const {
  return reshard_after_forward ? reshard_after_forward->group : std::nullopt;
}

void FSDPOptions::check_world_size(int64_t world_size) const {
  const auto group = reshard_group();
  check<ConfigurationError>(!group || (*group < world_size && world_size % *group == 0), "--strategy fsdp: "
                            "reshard_after_forward=", group.value_or(0), " keeps 1/", group.value_or(0),
                            " of each unit over groups of that many consecutive ranks, which must divide the ",
                            world_size, " processes and be fewer (", world_size, " is reshard_after_forward=true)");
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
  check<ConfigurationError>(!reshard_group() || !sharding_strategy || *sharding_strategy == ShardingStrategy::FullShard,
                            "--strategy fsdp: reshard_after_forward=", reshard_group().value_or(0), " reshards to a "
                            "group of the ranks FULL_SHARD shards over; it does not apply to sharding_strategy=",
                            hybrid() ? "HYBRID_SHARD" : "SHARD_GRAD_OP", "; drop one of the two");
  check<ConfigurationError>(!sharding_strategy || hybrid() || !reshard_after_forward ||
                                reshard_after_forward->reshard == (*sharding_strategy == ShardingStrategy::FullShard),
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

#pragma once
// Option keys that several strategies take with one meaning, declared once: each strategy's schema
// adds them with OptionSchema::with(...), so that the key, its help and its bounds cannot drift
// apart between strategies. FSDP's bucket_cap_mb is another concept (units' flat gradients
// waiting to be reduce-scattered together, 0 allowed) and is declared by FSDP alone.
#include <optional>
#include <string>

#include "core/error.h"
#include "core/option_schema.h"
#include "nn/module_selection.h"

namespace volt {

// broadcast_buffers: DDP, ShardedDDP, SlowMo. `scope` ends the help (e.g. over which ranks).
template <typename Options>
auto broadcast_buffers_option(bool Options::*member, std::string scope = "") {
  return [member, scope = std::move(scope)](OptionSchema<Options>& schema) {
    schema.option("broadcast_buffers", member, "rank 0's buffers to every rank before every training forward" + scope);
  };
}

// bucket_cap_mb of DDP's gradient reducer: DDP, and SlowMo's DDP within the node.
template <typename Options>
auto ddp_bucket_cap_mb_option(double Options::*member, std::string scope = "") {
  return [member, scope = std::move(scope)](OptionSchema<Options>& schema) {
    schema.option("bucket_cap_mb", member,
                  "bucket size in MiB of the gradient all-reduce" + scope + " (the first bucket holds at most 1 MiB)",
                  greater_than(0.0), at_most(1024.0 * 1024.0));
  };
}

// What a key that names module types takes (activation_checkpointing, fsdp:wrap): nothing, or
// names joined by '|'.
inline auto module_types_requirement() {
  return satisfies([](const std::string& names) { return names.empty() || valid_module_types(names); },
                   "module type names joined by '|' (Block|MLP)");
}

// activation_checkpointing: single_device, DDP, ShardedDDP, FSDP; the strategy's constructor hands
// checkpointing_policy(value) to Strategy::set_activation_checkpointing.
template <typename Options>
auto activation_checkpointing_option(std::string Options::*member) {
  return [member](OptionSchema<Options>& schema) {
    schema.option("activation_checkpointing", member,
                  "module types whose forwards run checkpointed (Block, or Block|MLP): their activations are "
                  "recomputed in the backward instead of kept; the modules are Sequential entries or called "
                  "through volt::call",
                  module_types_requirement());
  };
}

// The policy an activation_checkpointing value names; nullopt for none.
inline std::optional<ModuleSelector> checkpointing_policy(const std::string& types) {
  if (types.empty()) return std::nullopt;
  return ModuleSelector::by_type(types);
}

// nprocs_per_node: SlowMo, FSDP's HYBRID_SHARD. `scope` starts the help (when it applies).
template <typename Options>
auto nprocs_per_node_option(std::optional<int64_t> Options::*member, std::string scope = "") {
  return [member, scope = std::move(scope)](OptionSchema<Options>& schema) {
    schema.option("nprocs_per_node", member,
                  scope + "processes per node, consecutive ranks, a divisor of the world size (unset: the "
                          "cluster's); also simulates nodes of that size on one machine",
                  at_least(int64_t{1}));
  };
}

// check_world_size for a strategy with nprocs_per_node: it must divide the world size (unset: the
// cluster's nodes, which the Topology checks). `owner` starts the message ("--strategy slowmo").
inline void check_nprocs_per_node(int64_t world_size, std::optional<int64_t> nprocs_per_node,
                                  const std::string& owner) {
  if (!nprocs_per_node) return;
  check<ConfigurationError>(world_size % *nprocs_per_node == 0, owner, ": expected a world size divisible by "
                            "nprocs_per_node=", *nprocs_per_node, ", got ", world_size,
                            " processes; choose nprocs_per_node among the divisors of ", world_size);
}

}  // namespace volt

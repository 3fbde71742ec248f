#pragma once
// Option keys that several strategies take with one meaning, declared once: each strategy's schema
// adds them with OptionSchema::with(...), so that the key, its help and its bounds cannot drift
// apart between strategies. FSDP's bucket_cap_mb is another concept (units' flat gradients
// waiting to be reduce-scattered together, 0 allowed) and is declared by FSDP alone.
#include <string>

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

// activation_checkpointing: single_device, DDP, ShardedDDP, FSDP; the strategy's constructor hands
// it to Strategy::set_activation_checkpointing (nn/activation_checkpointing_policy.h).
template <typename Options>
auto activation_checkpointing_option(std::string Options::*member) {
  return [member](OptionSchema<Options>& schema) {
    schema.option("activation_checkpointing", member,
                  "module types whose forwards run checkpointed (Block, or Block|MLP): their activations are "
                  "recomputed in the backward instead of kept; the modules are Sequential entries or called "
                  "through volt::call",
                  satisfies([](const std::string& names) { return names.empty() || valid_module_types(names); },
                            "module type names joined by '|' (Block|MLP)"));
  };
}

}  // namespace volt

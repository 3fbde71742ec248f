// FSDP's unit tree: which parameters each unit flattens, the units' settings, and undoing it all.
#include <functional>
#include <map>
#include <set>
#include <unordered_map>

#include "core/error.h"
#include "strategies/fsdp/fsdp_strategy.h"

namespace volt {

fsdp::UnitSettings FSDPStrategy::unit_settings(bool is_root) {
  fsdp::UnitSettings settings;
  settings.is_root = is_root;
  settings.reshard_after_forward = options_.resharding();
  // Note [Resharding to a group]: the groups of reshard_after_forward=G consecutive ranks.
  if (const auto group = options_.reshard_group()) settings.reshard_group = &build_topology(*group).node();
  settings.reduce_dtype = options_.fp32_reduce_scatter ? torch::kFloat : compute_dtype();
  settings.pre_divide = fsdp::gradient_pre_divide_factor(communicator().size());  // the world's mean
  settings.forward_prefetch = options_.forward_prefetch;
  settings.backward_prefetch = options_.backward_prefetch;
  return settings;
}

void FSDPStrategy::wrap_selected_modules(torch::nn::Module& root) {
  if (!options_.wrap.empty())
    wrapped_modules_ =
        fsdp::wrap_selected(root, ModuleSelector::by_type(options_.wrap), "--strategy fsdp:wrap=" + options_.wrap);
  // Modules the model marked with fsdp::shard(), unless a type already made them units.
  std::set<const torch::nn::Module*> taken;
  for (const auto& item : wrapped_modules_) taken.insert(item.selected.module);
  auto marked = fsdp::wrap_selected(root,
                                   ModuleSelector::by_predicate(
                                       [&taken](const std::string&, const torch::nn::Module& m) {
                                         return fsdp::is_marked_for_sharding(m) && taken.count(&m) == 0;
                                       },
                                       "fsdp::shard"),
                                   "volt::fsdp::shard", /*required=*/false);
  for (auto& item : marked) wrapped_modules_.push_back(std::move(item));
}

// Each trainable parameter belongs to the innermost unit above it: walking the module tree, the
// unit changes where a unit's module is met (a hand-wrapped wrapper, an auto-wrapped module, or
// a module chosen by wrap= or marked by fsdp::shard()).
void FSDPStrategy::build_units(torch::nn::Module& root) {
  using Bind = std::function<void(const std::shared_ptr<fsdp::FullyShardedUnit>&)>;
  struct Pending {
    std::string name;
    Bind bind;  // empty for the root
    std::vector<std::pair<std::string, torch::Tensor>> parameters;
  };
  std::vector<Pending> pending{{"", nullptr, {}}};
  auto bind_wrapper = [this](fsdp::FullyShardedImpl* wrapper) -> Bind {
    return [this, wrapper](const std::shared_ptr<fsdp::FullyShardedUnit>& unit) {
      wrapper->bind(unit);
      bound_.push_back(wrapper);
    };
  };
  std::unordered_map<const torch::nn::Module*, Bind> unit_site;
  for (const auto& item : auto_wrapped_) unit_site[item.tree_module] = bind_wrapper(item.unit_module.get());
  for (const auto& item : wrapped_modules_) {
    unit_site[item.selected.module] = [wrapper = item.wrapper](const std::shared_ptr<fsdp::FullyShardedUnit>& unit) {
      wrapper->bind(unit);
    };
  }
  // A unit inside a checkpointed module would gather again in the recompute, which runs during the
  // unit's own backward: refused. The unit around the checkpointed module (the same module) is the
  // supported nesting.
  std::map<const torch::nn::Module*, std::string> checkpointed;
  if (const auto* policy = checkpointed_modules()) {
    for (const auto& selected : policy->modules()) checkpointed[selected.module] = selected.path;
  }
  const bool per_parameter = options_.layout == fsdp::ShardLayout::PerParameter;
  std::set<const c10::TensorImpl*> seen;
  std::function<void(torch::nn::Module&, const std::string&, size_t, const std::string*)> walk =
      [&](torch::nn::Module& m, const std::string& prefix, size_t current, const std::string* checkpointed_above) {
        Bind bind;
        if (auto* wrapper = dynamic_cast<fsdp::FullyShardedImpl*>(&m)) bind = bind_wrapper(wrapper);
        if (auto it = unit_site.find(&m); it != unit_site.end()) bind = it->second;
        const std::string path = prefix.empty() ? prefix : prefix.substr(0, prefix.size() - 1);
        if (bind && &m != &root) {
          check<ConfigurationError>(checkpointed_above == nullptr, "--strategy fsdp: the unit '", path,
                                    "' lies inside '", checkpointed_above ? *checkpointed_above : "",
                                    "', whose forward is checkpointed, so its recompute would gather the unit again "
                                    "during the unit's own backward; checkpoint the unit's module itself (the same "
                                    "type in activation_checkpointing as in wrap) or a module inside the unit");
          pending.push_back({path, bind, {}});
          current = pending.size() - 1;
        }
        if (auto it = checkpointed.find(&m); it != checkpointed.end()) checkpointed_above = &it->second;
        for (const auto& item : m.named_parameters(/*recurse=*/false)) {
          // The flat layout leaves frozen parameters whole; per parameter they are sharded too.
          if (!item.value().requires_grad() && !per_parameter) continue;
          if (!seen.insert(item.value().unsafeGetTensorImpl()).second) continue;
          pending[current].parameters.emplace_back(prefix + item.key(), item.value());
        }
        for (const auto& child : m.named_children()) {
          walk(*child.value(), prefix + child.key() + ".", current, checkpointed_above);
        }
      };
  walk(root, "", 0, nullptr);
  // Mixed precision gathers floating-point parameters in its dtype; otherwise each computes in its own.
  const auto cast_dtype = options_.mixed_precision ? std::optional<torch::Dtype>(compute_dtype()) : std::nullopt;
  auto bucket = std::make_unique<fsdp::ReduceScatterBucket>(
      shard_group(), static_cast<int64_t>(options_.bucket_cap_mb * 1024.0 * 1024.0), replica_group());
  fsdp::FSDPState::Units units;
  for (size_t i = 0; i < pending.size(); ++i) {
    auto flat = std::make_unique<fsdp::FlatParameter>(std::move(pending[i].parameters), shard_group(), cast_dtype,
                                                      state_->gathered(), communicator().size(), options_.cpu_offload,
                                                      options_.layout);
    auto unit = std::make_shared<fsdp::FullyShardedUnit>(pending[i].name, std::move(flat), unit_settings(i == 0),
                                                         *bucket, &state_->order());
    if (pending[i].bind) pending[i].bind(unit);
    units.push_back(std::move(unit));
  }
  state_->set_units(std::move(units), std::move(bucket), shard_group());
}

// A model outlives its strategy: its wrappers must not keep running this strategy's units, nor
// its Sequentials call wrappers the strategy put there.
void FSDPStrategy::unbind_units() {
  for (auto* wrapper : bound_) wrapper->bind(nullptr);
  bound_.clear();
  for (const auto& item : auto_wrapped_) fsdp::unwrap(item);
  auto_wrapped_.clear();
  for (auto it = wrapped_modules_.rbegin(); it != wrapped_modules_.rend(); ++it) fsdp::unwrap(*it);
  wrapped_modules_.clear();
  state_->clear();
  module_ = nullptr;
}

}  // namespace volt

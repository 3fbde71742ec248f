// FSDP's unit tree: which parameters each unit flattens, the units' settings, and undoing it all.
#include <functional>
#include <set>
#include <unordered_map>

#include "core/error.h"
#include "strategies/fsdp/fsdp_strategy.h"

namespace volt {

fsdp::UnitSettings FSDPStrategy::unit_settings(bool is_root) const {
  fsdp::UnitSettings settings;
  settings.is_root = is_root;
  settings.reshard_after_forward = options_.resharding();
  settings.reduce_dtype = options_.fp32_reduce_scatter ? torch::kFloat : compute_dtype();
  settings.pre_divide = fsdp::gradient_pre_divide_factor(communicator().size());  // the world's mean
  settings.forward_prefetch = options_.forward_prefetch;
  settings.backward_prefetch = options_.backward_prefetch;
  return settings;
}

// Each trainable parameter belongs to the innermost unit above it: walking the module tree, the
// unit changes where a unit's module is met (a hand-wrapped wrapper, or an auto-wrapped module).
void FSDPStrategy::build_units(torch::nn::Module& root) {
  struct Pending {
    std::string name;
    fsdp::FullyShardedImpl* wrapper;  // null for the root
    std::vector<std::pair<std::string, torch::Tensor>> parameters;
  };
  std::vector<Pending> pending{{"", nullptr, {}}};
  std::unordered_map<const torch::nn::Module*, fsdp::FullyShardedImpl*> auto_unit_of;
  for (const auto& item : auto_wrapped_) auto_unit_of[item.tree_module] = item.unit_module.get();
  std::set<const c10::TensorImpl*> seen;
  std::function<void(torch::nn::Module&, const std::string&, size_t)> walk = [&](torch::nn::Module& m,
                                                                                  const std::string& prefix,
                                                                                  size_t current) {
    auto* wrapper = dynamic_cast<fsdp::FullyShardedImpl*>(&m);
    if (auto it = auto_unit_of.find(&m); it != auto_unit_of.end()) wrapper = it->second;
    if (wrapper != nullptr && &m != &root) {
      pending.push_back({prefix.empty() ? prefix : prefix.substr(0, prefix.size() - 1), wrapper, {}});
      current = pending.size() - 1;
    }
    for (const auto& item : m.named_parameters(/*recurse=*/false)) {
      if (!item.value().requires_grad() || !seen.insert(item.value().unsafeGetTensorImpl()).second) continue;
      pending[current].parameters.emplace_back(prefix + item.key(), item.value());
    }
    for (const auto& child : m.named_children()) walk(*child.value(), prefix + child.key() + ".", current);
  };
  walk(root, "", 0);
  const auto dtype = compute_dtype();
  bucket_ = std::make_unique<fsdp::ReduceScatterBucket>(
      shard_group(), static_cast<int64_t>(options_.bucket_cap_mb * 1024.0 * 1024.0),
      options_.sharded() ? nullptr : &communicator());
  for (size_t i = 0; i < pending.size(); ++i) {
    auto flat = std::make_unique<fsdp::FlatParameter>(std::move(pending[i].parameters), shard_group(), dtype,
                                                      gathered_, communicator().size(), options_.cpu_offload);
    auto unit = std::make_shared<fsdp::FullyShardedUnit>(pending[i].name, std::move(flat), unit_settings(i == 0),
                                                         *bucket_, &order_);
    if (pending[i].wrapper != nullptr) {
      pending[i].wrapper->bind(unit);
      bound_.push_back(pending[i].wrapper);
    }
    units_.push_back(std::move(unit));
  }
}

// A model outlives its strategy: its wrappers must not keep running this strategy's units, nor
// its Sequentials call wrappers the strategy put there.
void FSDPStrategy::unbind_units() {
  for (auto* wrapper : bound_) wrapper->bind(nullptr);
  bound_.clear();
  for (const auto& item : auto_wrapped_) fsdp::unwrap(item);
  auto_wrapped_.clear();
  layouts_.clear();
  if (bucket_) bucket_->discard();
  units_.clear();
  bucket_.reset();
  order_ = fsdp::ExecutionOrder{};
  module_ = nullptr;
}

}  // namespace volt

#include "strategies/fsdp/shard_param_groups.h"

#include <string>
#include <unordered_map>

#include "core/error.h"

namespace volt::fsdp {

OptimizerLayouts replace_parameters_by_shards(const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers,
                                              const std::vector<ShardedParameters>& sharded,
                                              const std::string& strategy) {
  OptimizerLayouts layouts;
  std::unordered_map<const c10::TensorImpl*, std::pair<const ShardedParameters*, size_t>> owner_of;
  for (const auto& s : sharded) {
    const auto& entries = s.flat->entries();
    for (size_t e = 0; e < entries.size(); ++e) owner_of[entries[e].parameter.unsafeGetTensorImpl()] = {&s, e};
  }
  std::map<const ShardedParameters*, std::string> placed;        // flat → "optimizer i, group g"
  std::map<const c10::TensorImpl*, std::string> placed_entries;  // per parameter: parameter → the same
  for (size_t o = 0; o < optimizers.size(); ++o) {
    auto& groups = optimizers[o]->param_groups();
    auto& layout = layouts[optimizers[o].get()];
    for (size_t g = 0; g < groups.size(); ++g) {
      const std::string where = "optimizer " + std::to_string(o) + ", param group " + std::to_string(g);
      std::vector<torch::Tensor> replaced;
      std::map<const ShardedParameters*, size_t> count;
      std::vector<const ShardedParameters*> order;
      GroupLayout originals;
      for (const auto& p : groups[g].params()) {
        auto it = owner_of.find(p.unsafeGetTensorImpl());
        if (it == owner_of.end()) {
          originals.push_back({nullptr, 0, replaced.size(), ""});
          replaced.push_back(p);  // not sharded (frozen, or not the module's): stepped as it is
          continue;
        }
        const auto* owner = it->second.first;
        const auto& flat = *owner->flat;
        const size_t entry = it->second.second;
        if (flat.layout() == ShardLayout::PerParameter) {
          // Per parameter: its own shard in its place (Note [Per-parameter layout]).
          const auto [at, inserted] = placed_entries.emplace(p.unsafeGetTensorImpl(), where);
          check<ConfigurationError>(inserted, strategy, ": parameter '", flat.entries()[entry].name, "' is in ",
                                    at->second, " and in ", where,
                                    "; each parameter may be stepped by one optimizer "
                                    "only");
          originals.push_back({owner->flat, entry, replaced.size(), owner->owner});
          replaced.push_back(flat.stepped(entry));
          continue;
        }
        if (count[owner]++ == 0) order.push_back(owner);
        originals.push_back({owner->flat, entry, 0, owner->owner});
      }
      std::map<const FlatParameter*, size_t> shard_index;
      for (const auto* owner : order) {
        const auto& flat = *owner->flat;
        check<ConfigurationError>(count[owner] == flat.entries().size(), strategy, ": ", where, " holds ", count[owner],
                                  " of the ", flat.entries().size(), " parameters of ", owner->owner,
                                  "; a unit's parameters are one flat shard and must all be in "
                                  "one param group (give them the same options, or wrap them in separate units)");
        const auto [it, inserted] = placed.emplace(owner, where);
        check<ConfigurationError>(inserted, strategy, ": the parameters of ", owner->owner, " are in ", it->second,
                                  " and in ", where, "; each parameter may be stepped by one optimizer only");
        shard_index[owner->flat] = replaced.size();
        // The optimizer steps the shard in place: the const FlatParameter only names it.
        replaced.push_back(flat.shard());
      }
      for (auto& original : originals) {
        if (original.flat != nullptr && original.flat->layout() == ShardLayout::Flat)
          original.stepped = shard_index.at(original.flat);
      }
      layout.push_back(std::move(originals));
      check<ConfigurationError>(optimizers[o]->state().empty(), strategy, ": ", where,
                                " already has state; build optimizers in configure_optimizers, before any step");
      groups[g].params() = std::move(replaced);
    }
  }
  return layouts;
}

OptimizerLayouts replace_parameters_by_shards(const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers,
                                              const std::vector<std::shared_ptr<FullyShardedUnit>>& units) {
  std::vector<ShardedParameters> sharded;
  for (const auto& unit : units) sharded.push_back({&unit->flat(), unit->describe()});
  return replace_parameters_by_shards(optimizers, sharded);
}

}  // namespace volt::fsdp

#include "strategies/fsdp/shard_param_groups.h"

#include <string>
#include <unordered_map>

#include "core/error.h"

namespace volt::fsdp {

OptimizerLayouts replace_parameters_by_shards(const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers,
                                              const std::vector<std::shared_ptr<FullyShardedUnit>>& units) {
  OptimizerLayouts layouts;
  std::unordered_map<const c10::TensorImpl*, std::pair<FullyShardedUnit*, size_t>> unit_of;
  for (const auto& unit : units) {
    const auto& entries = unit->flat().entries();
    for (size_t e = 0; e < entries.size(); ++e) unit_of[entries[e].parameter.unsafeGetTensorImpl()] = {unit.get(), e};
  }
  std::map<const FullyShardedUnit*, std::string> placed;  // unit → "optimizer i, group g"
  std::map<const c10::TensorImpl*, std::string> placed_entries;  // per parameter: parameter → the same
  for (size_t o = 0; o < optimizers.size(); ++o) {
    auto& groups = optimizers[o]->param_groups();
    auto& layout = layouts[optimizers[o].get()];
    for (size_t g = 0; g < groups.size(); ++g) {
      const std::string where = "optimizer " + std::to_string(o) + ", param group " + std::to_string(g);
      std::vector<torch::Tensor> replaced;
      std::map<const FullyShardedUnit*, size_t> count;
      std::vector<FullyShardedUnit*> order;
      GroupLayout originals;
      for (const auto& p : groups[g].params()) {
        auto it = unit_of.find(p.unsafeGetTensorImpl());
        if (it == unit_of.end()) {
          originals.push_back({nullptr, 0, replaced.size()});
          replaced.push_back(p);  // not sharded (frozen, or not the module's): stepped as it is
          continue;
        }
        auto* unit = it->second.first;
        const size_t entry = it->second.second;
        if (unit->flat().layout() == ShardLayout::PerParameter) {
          // Per parameter: its own shard in its place (Note [Per-parameter layout]).
          const auto [at, inserted] = placed_entries.emplace(p.unsafeGetTensorImpl(), where);
          check<ConfigurationError>(inserted, "fsdp: parameter '", unit->flat().entries()[entry].name, "' is in ",
                                    at->second, " and in ", where, "; each parameter may be stepped by one optimizer "
                                    "only");
          originals.push_back({unit, entry, replaced.size()});
          replaced.push_back(unit->flat().stepped(entry));
          continue;
        }
        if (count[unit]++ == 0) order.push_back(unit);
        originals.push_back({unit, entry, 0});
      }
      std::map<const FullyShardedUnit*, size_t> shard_index;
      for (auto* unit : order) {
        check<ConfigurationError>(count[unit] == unit->flat().entries().size(), "fsdp: ", where, " holds ",
                                  count[unit], " of the ", unit->flat().entries().size(), " parameters of ",
                                  unit->describe(), "; a unit's parameters are one flat shard and must all be in "
                                  "one param group (give them the same options, or wrap them in separate units)");
        const auto [it, inserted] = placed.emplace(unit, where);
        check<ConfigurationError>(inserted, "fsdp: the parameters of ", unit->describe(), " are in ", it->second,
                                  " and in ", where, "; each parameter may be stepped by one optimizer only");
        shard_index[unit] = replaced.size();
        replaced.push_back(unit->flat().shard());
      }
      for (auto& original : originals) {
        if (original.unit != nullptr && original.unit->flat().layout() == ShardLayout::Flat)
          original.stepped = shard_index.at(original.unit);
      }
      layout.push_back(std::move(originals));
      check<ConfigurationError>(optimizers[o]->state().empty(), "fsdp: ", where,
                                " already has state; build optimizers in configure_optimizers, before any step");
      groups[g].params() = std::move(replaced);
    }
  }
  return layouts;
}

}  // namespace volt::fsdp

#include "strategies/fsdp/flat_optimizer_state.h"

#include <map>

#include "checkpoint/optimizer_state.h"
#include "checkpoint/sharded_checkpoint.h"
#include "core/error.h"
#include "strategies/fsdp/flat_slice.h"

namespace volt::fsdp {

namespace {

using GenericDict = c10::impl::GenericDict;

// {index: state} and {name: value}, typed as optimizer_state_dict builds them.
GenericDict new_index_dict() { return GenericDict(c10::IntType::get(), c10::AnyType::get()); }
GenericDict new_name_dict() { return GenericDict(c10::StringType::get(), c10::AnyType::get()); }

// A state value that holds one value per element of a shard (or, in PyTorch's layout, of
// the parameter): the rest (Adam's step) is per parameter.
bool per_element(const c10::IValue& value, int64_t numel) {
  return value.isTensor() && value.toTensor().dim() >= 1 && value.toTensor().numel() == numel;
}

// `value` with each real tensor in it copied (placeholders stay: reading one makes a new tensor).
c10::IValue owned(const c10::IValue& value) {
  if (value.isTensor()) return value.toTensor().is_meta() ? value : c10::IValue(value.toTensor().clone());
  if (value.isGenericDict()) {
    auto out = new_name_dict();
    for (const auto& item : value.toGenericDict()) out.insert(item.key(), owned(item.value()));
    return out;
  }
  return value;  // numbers, strings, tuples of numbers (an optimizer's state holds no other containers)
}

}  // namespace

StateDict consolidate_optimizer_state(torch::optim::Optimizer& optimizer, const std::vector<GroupLayout>& groups,
                                      int64_t root) {
  const StateDict sharded = optimizer_state_dict(optimizer);
  check<NotSupportedError>(sharded.contains("state"),
                           "fsdp: the full optimizer state needs an optimizer state codec "
                           "for this optimizer class (see optimizer_state_codec.h), or state_dict_type=sharded");
  const auto states = sharded.at("state").toGenericDict();
  const auto saved_groups = sharded.at("param_groups").toListRef();
  VOLT_INTERNAL_ASSERT(saved_groups.size() == groups.size(), "one recorded layout per param group");
  auto out_states = new_index_dict();
  c10::impl::GenericList out_groups(c10::AnyType::get());
  int64_t base = 0, original = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    // Each unit's per-element state, gathered once to the root (every rank: the same units, keys in
    // order), on the host there.
    std::map<size_t, std::map<std::string, torch::Tensor>> gathered;
    for (const auto& p : groups[g]) {
      if (p.flat == nullptr || gathered.count(p.stepped)) continue;
      auto& per_key = gathered[p.stepped];
      const auto state = optimizer_state_at(states, base + static_cast<int64_t>(p.stepped));
      if (!state) continue;
      std::map<std::string, c10::IValue> sorted;
      for (const auto& item : *state) sorted.emplace(item.key().toStringRef(), item.value());
      for (const auto& [key, value] : sorted) {
        if (!per_element(value, p.flat->stepped_numel(p.entry))) continue;
        const auto whole = p.flat->gather_stepped_to(p.entry, value.toTensor(), root);
        per_key[key] = whole.defined() ? whole.to(torch::kCPU) : whole;
      }
    }
    c10::impl::GenericList indices(c10::IntType::get());
    for (const auto& p : groups[g]) {
      const int64_t index = original++;
      indices.push_back(index);
      const auto state = optimizer_state_at(states, base + static_cast<int64_t>(p.stepped));
      if (!state) continue;
      if (p.flat == nullptr) {
        out_states.insert(index, *state);
        continue;
      }
      const auto& entry = p.flat->entries()[p.entry];
      auto entry_state = new_name_dict();
      for (const auto& item : *state) {
        const auto& key = item.key().toStringRef();
        auto it = gathered.at(p.stepped).find(key);
        if (it != gathered.at(p.stepped).end()) {
          if (!it->second.defined()) continue;  // not the root: the values stay on their ranks
          // A view of the unit's gathered state, as the parameters are (the file writes each
          // storage once): no second copy of the whole state on the root.
          entry_state.insert(key,
                             it->second.narrow(0, p.flat->stepped_offset(p.entry), entry.numel()).view(entry.shape));
        } else if (item.value().isTensor()) {
          // Each parameter its own copy: PyTorch's Adam advances state["step"] in place, so one
          // tensor shared by a unit's parameters (and kept shared by torch.load) would count a
          // step once per parameter.
          entry_state.insert(key, item.value().toTensor().clone());
        } else {
          entry_state.insert(key, item.value());
        }
      }
      out_states.insert(index, entry_state);
    }
    auto options = param_group_options(saved_groups[g], "fsdp: param group");
    options.set("params", indices);
    out_groups.push_back(options.to_ivalue());
    base += static_cast<int64_t>(optimizer.param_groups()[g].params().size());
  }
  StateDict full = sharded;
  full.set("state", out_states);
  full.set("param_groups", out_groups);
  return full;
}

void load_consolidated_optimizer_state(torch::optim::Optimizer& optimizer, const std::vector<GroupLayout>& groups,
                                       const StateDict& state, const std::string& what,
                                       const ShardedCheckpoint* source) {
  const auto states = state.at("state").toGenericDict();
  const auto saved = state.at("param_groups");
  check<CheckpointError>(saved.isList() && saved.toListRef().size() == groups.size(), what, ": expected ",
                         groups.size(), " param groups, the checkpoint holds ",
                         saved.isList() ? saved.toListRef().size() : 0,
                         "; configure_optimizers must build the same parameter groups as the run that wrote it");
  auto sharded_states = new_index_dict();
  c10::impl::GenericList sharded_groups(c10::AnyType::get());
  int64_t base = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto saved_group = StateDict::from_ivalue(saved.toListRef()[g], what + " param group");
    const auto saved_indices = saved_group.get_ints("params");
    check<CheckpointError>(saved_indices.size() == groups[g].size(), what, ": param group ", g, " has ",
                           saved_indices.size(), " parameters in the checkpoint, ", groups[g].size(),
                           " here; configure_optimizers must build the same parameter groups");
    // The states of each stepped tensor's original parameters, in entry order.
    std::map<size_t, std::vector<std::pair<const OriginalParameter*, GenericDict>>> by_stepped;
    for (size_t i = 0; i < groups[g].size(); ++i) {
      const auto entry_state = optimizer_state_at(states, saved_indices[i]);
      if (entry_state) by_stepped[groups[g][i].stepped].emplace_back(&groups[g][i], *entry_state);
    }
    for (const auto& [stepped, parts] : by_stepped) {
      const auto* first = parts.front().first;
      if (first->flat == nullptr) {
        sharded_states.insert(base + static_cast<int64_t>(stepped), owned(c10::IValue(parts.front().second)));
        continue;
      }
      const auto& flat = *first->flat;
      check<CheckpointError>(parts.size() == flat.stepped_entry_count(), what, ": ", parts.size(), " of the ",
                             flat.stepped_entry_count(), " parameters of ", first->owner,
                             " have optimizer state in the checkpoint; a unit's parameters are stepped together");
      auto shard_state = new_name_dict();
      for (const auto& item : parts.front().second) {
        const auto& key = item.key().toStringRef();
        const auto& entry0 = flat.entries()[first->entry];
        // A 0-d parameter's per-element state is 0-d too (its shard is one row): told from Adam's
        // 0-d step by name.
        const bool scalar_state = flat.layout() == ShardLayout::PerParameter && entry0.shape.empty() &&
                                  item.value().isTensor() && item.value().toTensor().dim() == 0 && key != "step";
        if (!scalar_state && !per_element(item.value(), entry0.numel())) {
          shard_state.insert(key, owned(item.value()));  // placeholders among them are read below
          continue;
        }
        std::vector<torch::Tensor> values(flat.entries().size());
        for (const auto& [original, entry_state] : parts) {
          const auto value = entry_state.at(key).toTensor();
          check<CheckpointError>(value.numel() == flat.entries()[original->entry].numel(), what, ": '", key,
                                 "' of parameter '", flat.entries()[original->entry].name, "' has ", value.numel(),
                                 " elements, the parameter ", flat.entries()[original->entry].numel());
          values[original->entry] = value;
        }
        shard_state.insert(
            key, read_stepped_slice(flat, first->entry, values, source, flat.stepped(first->entry).scalar_type()));
      }
      sharded_states.insert(base + static_cast<int64_t>(stepped), shard_state);
    }
    const int64_t stepped_count = static_cast<int64_t>(optimizer.param_groups()[g].params().size());
    c10::impl::GenericList indices(c10::IntType::get());
    for (int64_t i = 0; i < stepped_count; ++i) indices.push_back(base + i);
    auto options = param_group_options(saved.toListRef()[g], what + " param group");
    options.set("params", indices);
    sharded_groups.push_back(options.to_ivalue());
    base += stepped_count;
  }
  StateDict sharded = state.shallow_copy();
  sharded.set("state", sharded_states);
  sharded.set("param_groups", sharded_groups);
  // What is left of a placeholder is small (Adam's step, parameters outside the units): read whole.
  if (source != nullptr) sharded = source->materialize(sharded);
  // Every tensor of `sharded` is new (a slice, a copy or just read): the optimizer keeps them
  // rather than a second copy of its whole state (Note [Loading a slice]).
  load_optimizer_state_dict(optimizer, sharded, what, {}, /*take_tensors=*/true);
}

}  // namespace volt::fsdp

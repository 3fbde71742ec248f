#include "checkpoint/per_rank_entries.h"

#include "core/error.h"

namespace volt {

c10::IValue state_dict_list(const std::vector<StateDict>& states) {
  c10::impl::GenericList list(c10::AnyType::get());
  for (const auto& state : states) list.push_back(state.to_ivalue());
  return list;
}

PerRankEntry per_rank_entry(const StateDict& state, const std::string& key, int64_t rank, int64_t world_size,
                            const std::string& source) {
  const auto value = state.at(key);
  check<CheckpointError>(value.isList(), source, ": '", key, "' is not a list");
  const auto& list = value.toListRef();
  PerRankEntry found{std::nullopt, static_cast<int64_t>(list.size())};
  if (found.saved_ranks == world_size) {
    found.entry = StateDict::from_ivalue(list[static_cast<size_t>(rank)], source + " " + key);
  }
  return found;
}

}  // namespace volt

#include "checkpoint/per_rank_entries.h"

#include "core/error.h"
#include "core/warning.h"

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

std::optional<StateDict> per_rank_entry_or_warn(const StateDict& state, const std::string& key, int64_t rank,
                                                int64_t world_size, const std::string& who,
                                                const std::string& what_starts_afresh) {
  auto found = per_rank_entry(state, key, rank, world_size, who + ": the checkpoint");
  if (!found.entry && rank == 0) {
    warn(who + ": the checkpoint's '" + key + "' holds " + std::to_string(found.saved_ranks) + " ranks, this run has " +
         std::to_string(world_size) + ": " + what_starts_afresh);
  }
  return std::move(found.entry);
}

}  // namespace volt

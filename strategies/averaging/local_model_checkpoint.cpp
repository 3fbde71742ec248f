#include "strategies/averaging/local_model_checkpoint.h"

#include <map>

#include "checkpoint/module_state.h"
#include "checkpoint/optimizer_state.h"
#include "checkpoint/per_rank_entries.h"
#include "core/error.h"
#include "core/warning.h"

namespace volt::averaging {
namespace {

StateDict local_model_state(const LocalModel& local) {
  VOLT_INTERNAL_ASSERT(local.module != nullptr && local.optimizers != nullptr,
                       "a local model is saved before its strategy set the module up");
  StateDict state;
  state.set("state_dict", module_state_dict(*local.module));
  std::vector<StateDict> optimizers;
  for (const auto& optimizer : *local.optimizers) optimizers.push_back(volt::optimizer_state_dict(*optimizer));
  state.set("optimizer_states", state_dict_list(optimizers));
  return state;
}

void load_local_model_state(const LocalModel& local, const StateDict& state, int64_t rank) {
  VOLT_INTERNAL_ASSERT(local.module != nullptr && local.optimizers != nullptr,
                       "a local model is loaded before its strategy set the module up");
  const std::string source = "the checkpoint's local model of rank " + std::to_string(rank);
  load_module_state_dict(*local.module, state.child("state_dict"), /*strict=*/true, source);
  const auto optimizers = state.at("optimizer_states");
  const auto& mine = *local.optimizers;
  check<CheckpointError>(optimizers.isList() && optimizers.toListRef().size() == mine.size(), source,
                         " holds the state of ", optimizers.isList() ? optimizers.toListRef().size() : 0,
                         " optimizers, this run has ", mine.size(), "; build the same optimizers");
  std::map<const void*, std::string> names;
  for (const auto& p : local.module->named_parameters()) names.emplace(p.value().unsafeGetTensorImpl(), p.key());
  const ParameterNamer name_of = [&](const torch::Tensor& p) {
    auto found = names.find(p.unsafeGetTensorImpl());
    return found == names.end() ? std::string() : found->second;
  };
  for (size_t i = 0; i < mine.size(); ++i) {
    const std::string what = source + ", optimizer " + std::to_string(i);
    volt::load_optimizer_state_dict(*mine[i], StateDict::from_ivalue(optimizers.toListRef()[i], what), what, name_of);
  }
}

}  // namespace

void save_averager_section(StateDict& section, ModelAverager& averager, const LocalModel& local,
                           StrategyCollectives& collectives, CheckpointLayout layout) {
  if (!averager.state_differs_per_rank() || layout == CheckpointLayout::Sharded) {
    section.set("model_averager", averager.state_dict());
  } else if (const auto all = collectives.gather_states(averager.state_dict()); !all.empty()) {
    section.set("model_averager_per_rank", state_dict_list(all));
  }
  if (layout == CheckpointLayout::Full && averager.past_warmup()) {
    const auto all = collectives.gather_states(local_model_state(local));
    if (!all.empty()) section.set("local_models_per_rank", state_dict_list(all));
  }
}

void load_averager_section(const StateDict& state, ModelAverager* averager, bool reducer_restored,
                           const LocalModel& local, const StrategyCollectives& collectives, const std::string& who) {
  const auto topology = collectives.topology();
  if (averager && reducer_restored && state.contains("model_averager")) {
    averager->load_state_dict(state.child("model_averager"));
  } else if (averager && reducer_restored && state.contains("model_averager_per_rank")) {
    if (const auto mine =
            per_rank_entry_or_warn(state, "model_averager_per_rank", topology.global_rank, topology.world_size, who,
                                   "the averager starts afresh")) {
      averager->load_state_dict(*mine);
    }
  }
  if (!state.contains("local_models_per_rank")) return;
  if (!averager) {
    if (topology.global_rank == 0) {
      warn(who + ": the checkpoint was written in post-local-SGD's local phase, with a model per rank; this run has "
           "no model averager, so every rank continues from rank 0's model and optimizer state");
    }
    return;
  }
  if (const auto mine =
          per_rank_entry_or_warn(state, "local_models_per_rank", topology.global_rank, topology.world_size, who,
                                 "every rank continues from rank 0's model and optimizer state")) {
    load_local_model_state(local, *mine, topology.global_rank);
  }
}

}  // namespace volt::averaging

#include "strategies/pipeline/pipeline_checkpoint_state.h"

#include <set>
#include "checkpoint/module_state.h"
#include "checkpoint/state_dict_bytes.h"

#include "core/error.h"
#include "distributed/state_gather.h"
#include "strategies/fsdp/flat_optimizer_state.h"
#include "strategies/pipeline/pipeline_strategy.h"

namespace volt {

StateDict PipelineCheckpointState::contribution() const {
  if (!layout_.shards) return layout_.mesh->coordinate("dp") == 0 ? layout_.ownership->owned_state() : StateDict();
  const auto gathered = layout_.shards->gathered_while();
  StateDict own;
  if (layout_.mesh->coordinate("dp") != 0) return own;
  // Copies: the gathered parameters' memory is freed when the guard ends.
  const auto state = layout_.ownership->owned_state();
  for (const auto& key : state.keys()) own.set(key, state.get_tensor(key).clone());
  return own;
}

StateDict PipelineCheckpointState::merged(const torch::nn::Module& module, const std::vector<StateDict>& shares) {
  StateDict whole;
  for (const auto& key : module_state_dict(module).keys()) {
    for (const auto& share : shares) {
      if (!share.contains(key)) continue;
      whole.set(key, share.at(key));
      break;
    }
    check<CheckpointError>(whole.contains(key), "pipeline: no stage holds '", key, "'");
  }
  return whole;
}

StateDict PipelineCheckpointState::model_state_dict(torch::nn::Module& module, CheckpointLayout layout) {
  if (!layout_.ownership) return CheckpointState::model_state_dict(module, layout);
  VOLT_INTERNAL_ASSERT(layout == CheckpointLayout::Full, "pipeline: writes full checkpoints only");
  const auto shares = gather_state_dicts(group_.communicator(), contribution(), 0);
  if (context().topology().global_rank != 0) return module_state_dict(module);  // not written
  return merged(module, shares);
}

StateDict PipelineCheckpointState::full_model_state_dict(torch::nn::Module& module) {
  if (!layout_.ownership) return CheckpointState::full_model_state_dict(module);
  const auto bytes = group_.communicator().all_gather_bytes(state_dict_to_bytes(contribution()));
  std::vector<StateDict> shares;
  for (size_t r = 0; r < bytes.size(); ++r)
    shares.push_back(state_dict_from_bytes(bytes[r], "the pipeline stage of rank " + std::to_string(r)));
  return merged(module, shares);
}

void PipelineCheckpointState::load_model_state_dict(torch::nn::Module& module, const StateDict& state,
                                                    CheckpointLayout layout, bool strict, const std::string& source,
                                                    const ShardedCheckpoint* slices) {
  if (!layout_.ownership) return CheckpointState::load_model_state_dict(module, state, layout, strict, source, slices);
  check<CheckpointError>(slices == nullptr, source, ": a pipeline loads whole tensors, not slices");
  if (layout_.shared) layout_.shared->values_changed();  // sent again before the next forward
  if (!layout_.shards) return layout_.ownership->load(state, strict, source);
  const auto gathered = layout_.shards->gathered_while();
  layout_.ownership->load(state, strict, source);
  layout_.shards->store_gathered_into_shards();
}

StateDict PipelineCheckpointState::optimizer_state_dict(torch::optim::Optimizer& optimizer, CheckpointLayout layout) {
  if (!layout_.shards || layout_.shards->optimizer_layouts().count(&optimizer) == 0) {
    return CheckpointState::optimizer_state_dict(optimizer, layout);
  }
  const auto& groups = layout_.shards->optimizer_layouts().at(&optimizer);
  // The stage's state complete on its first replica, then the stages' merged on global rank 0.
  const auto stage_state = fsdp::consolidate_optimizer_state(optimizer, groups, /*root=*/0);
  const bool first_replica = layout_.mesh->coordinate("dp") == 0;
  const auto shares = gather_state_dicts(layout_.mesh->group("pp"), first_replica ? stage_state : StateDict(), 0);
  if (context().topology().global_rank != 0) return stage_state;  // not written
  auto states = c10::impl::GenericDict(c10::IntType::get(), c10::AnyType::get());
  for (const auto& share : shares) {
    for (const auto& item : share.at("state").toGenericDict()) states.insert(item.key(), item.value());
  }
  StateDict whole = stage_state;
  whole.set("state", states);
  return whole;
}

void PipelineCheckpointState::load_optimizer_state_dict(torch::optim::Optimizer& optimizer, const StateDict& state,
                                                        CheckpointLayout layout, const std::string& what,
                                                        const ParameterNamer& name_of,
                                                        const ShardedCheckpoint* slices) {
  if (!layout_.shards || layout_.shards->optimizer_layouts().count(&optimizer) == 0) {
    return CheckpointState::load_optimizer_state_dict(optimizer, state, layout, what, name_of, slices);
  }
  const auto& groups = layout_.shards->optimizer_layouts().at(&optimizer);
  // This stage's parameters' state only: the others' belong to the other stages' shards.
  std::set<int64_t> stage_indices;
  const auto saved_groups = state.at("param_groups").toListRef();
  for (size_t g = 0; g < groups.size() && g < saved_groups.size(); ++g) {
    const auto indices = StateDict::from_ivalue(saved_groups[g], what + " param group").get_ints("params");
    for (size_t i = 0; i < indices.size() && i < groups[g].size(); ++i) {
      if (groups[g][i].flat != nullptr) stage_indices.insert(indices[i]);
    }
  }
  auto states = c10::impl::GenericDict(c10::IntType::get(), c10::AnyType::get());
  for (const auto& item : state.at("state").toGenericDict()) {
    if (stage_indices.count(item.key().toInt()) > 0) states.insert(item.key(), item.value());
  }
  StateDict stage_state = state.shallow_copy();
  stage_state.set("state", states);
  fsdp::load_consolidated_optimizer_state(optimizer, groups, stage_state, what, slices);
}

std::vector<int64_t> PipelineCheckpointState::held_gradient_shape(const std::string& name,
                                                                  const torch::Tensor& parameter) const {
  if (!layout_.ownership) return parameter.sizes().vec();
  return layout_.ownership->whole_shape(name, parameter);
}

}  // namespace volt

#include "strategies/pipeline/pipeline_checkpoint_state.h"

#include "checkpoint/module_state.h"
#include "checkpoint/state_dict_bytes.h"
#include "core/error.h"
#include "distributed/state_gather.h"
#include "strategies/pipeline/pipeline_strategy.h"

namespace volt {

StateDict PipelineCheckpointState::contribution() const {
  return layout_.mesh->coordinate("dp") == 0 ? layout_.ownership->owned_state() : StateDict();
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
  layout_.ownership->load(state, strict, source);
}

std::vector<int64_t> PipelineCheckpointState::held_gradient_shape(const std::string& name,
                                                                  const torch::Tensor& parameter) const {
  if (!layout_.ownership) return parameter.sizes().vec();
  return layout_.ownership->whole_shape(name, parameter);
}

}  // namespace volt

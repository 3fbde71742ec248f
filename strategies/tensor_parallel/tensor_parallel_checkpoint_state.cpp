#include "strategies/tensor_parallel/tensor_parallel_checkpoint_state.h"

#include "checkpoint/module_state.h"
#include "core/error.h"
#include "strategies/fsdp/flat_optimizer_state.h"
#include "strategies/tensor_parallel/tensor_parallel_strategy.h"

namespace volt {

namespace {

std::vector<torch::Tensor> parameters_in_order(torch::optim::Optimizer& optimizer) {
  std::vector<torch::Tensor> parameters;
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) parameters.push_back(p);
  }
  return parameters;
}

// `state` (PyTorch's optimizer layout) with every tensor of each split parameter's entry whose
// shape is `from(parameter)` replaced by `convert(split, parameter, tensor)`. Every rank walks the
// same entries in the same order (a convert may be a collective).
StateDict with_split_state(
    const StateDict& state, const std::vector<torch::Tensor>& parameters, const TensorParallelLayout& layout,
    const std::function<std::vector<int64_t>(const tp::SplitModule&, const torch::Tensor&)>& from,
    const std::function<torch::Tensor(const tp::SplitModule&, const torch::Tensor&, const torch::Tensor&)>& convert) {
  if (!state.contains("state")) return state;  // an optimizer without a codec: LibTorch's archive
  StateDict out = state.shallow_copy();
  auto states = state.at("state").toGenericDict().copy();
  for (size_t i = 0; i < parameters.size(); ++i) {
    const auto* split = layout.split_of(parameters[i]);
    if (split == nullptr) continue;
    auto entry = optimizer_state_at(states, static_cast<int64_t>(i));
    if (!entry) continue;
    auto converted = entry->copy();
    for (const auto& item : *entry) {
      if (!item.value().isTensor()) continue;
      const auto tensor = item.value().toTensor();
      if (tensor.sizes().vec() != from(*split, parameters[i])) continue;
      converted.insert_or_assign(item.key(), convert(*split, parameters[i], tensor));
    }
    states.insert_or_assign(c10::IValue(static_cast<int64_t>(i)), converted);
  }
  out.set("state", states);
  return out;
}

// data_parallel=fsdp: the optimizer's parameters as configure_optimizers gave them (this rank's
// slices and whole parameters), in order: what its shards stand for.
std::vector<torch::Tensor> original_parameters(torch::optim::Optimizer& optimizer,
                                               const std::vector<fsdp::GroupLayout>& groups) {
  std::vector<torch::Tensor> parameters;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const auto& p : groups[g]) {
      parameters.push_back(p.flat != nullptr ? p.flat->entries()[p.entry].parameter
                                             : optimizer.param_groups()[g].params()[p.stepped]);
    }
  }
  return parameters;
}

std::vector<int64_t> shape_of(const tp::SplitModule&, const torch::Tensor& parameter) {
  return parameter.sizes().vec();
}
torch::Tensor gathered_slice(const tp::SplitModule& split, const torch::Tensor& parameter, const torch::Tensor& slice) {
  return split.gathered(parameter, slice);
}
std::vector<int64_t> whole_shape_of(const tp::SplitModule& split, const torch::Tensor& parameter) {
  return split.whole_shape(parameter);
}
torch::Tensor slice_of_whole(const tp::SplitModule& split, const torch::Tensor& parameter, const torch::Tensor& whole) {
  return split.slice_of(parameter, whole).clone();
}

}  // namespace

ScopeGuard TensorParallelCheckpointState::gathered_while() const {
  return layout_.shards ? layout_.shards->gathered_while() : ScopeGuard();
}

StateDict TensorParallelCheckpointState::model_state_dict(torch::nn::Module& module, CheckpointLayout layout) {
  const auto gathered = gathered_while();
  StateDict state = module_state_dict(module);
  for (const auto& item : module.named_parameters()) {
    if (const auto* split = layout_.split_of(item.value())) {
      state.set(item.key(), split->gathered(item.value(), item.value().detach()));
    } else if (layout_.shards) {
      state.set(item.key(), item.value().detach().clone());  // its gathered memory is freed after
    }
  }
  return state;
}

void TensorParallelCheckpointState::load_model_state_dict(torch::nn::Module& module, const StateDict& state,
                                                          CheckpointLayout layout, bool strict,
                                                          const std::string& source, const ShardedCheckpoint* slices) {
  check<CheckpointError>(slices == nullptr, source, ": tensor_parallel loads whole tensors, not slices");
  const auto gathered = gathered_while();
  StateDict mine = state.shallow_copy();
  for (const auto& item : module.named_parameters()) {
    const auto* split = layout_.split_of(item.value());
    if (split == nullptr || !state.contains(item.key())) continue;
    const auto whole = state.get_tensor(item.key());
    const auto shape = split->whole_shape(item.value());
    check<CheckpointError>(whole.sizes().vec() == shape, source, ": '", item.key(), "' has shape ", whole.sizes(),
                           ", the model's is ", c10::IntArrayRef(shape));
    mine.set(item.key(), split->slice_of(item.value(), whole));
  }
  load_module_state_dict(module, mine, strict, source);
  if (layout_.shards) layout_.shards->store_gathered_into_shards();
}

StateDict TensorParallelCheckpointState::optimizer_state_dict(torch::optim::Optimizer& optimizer,
                                                              CheckpointLayout layout) {
  if (!layout_.shards || layout_.shards->optimizer_layouts().count(&optimizer) == 0) {
    return with_split_state(volt::optimizer_state_dict(optimizer), parameters_in_order(optimizer), layout_, shape_of,
                            gathered_slice);
  }
  const auto& groups = layout_.shards->optimizer_layouts().at(&optimizer);
  // The slices' state whole on each tp group's first replica (global rank 0's among them), then
  // each split one gathered over tp there: every rank of a tp group is in the same replica.
  const auto gathered = gathered_while();
  return with_split_state(fsdp::consolidate_optimizer_state(optimizer, groups, /*root=*/0),
                          original_parameters(optimizer, groups), layout_, shape_of, gathered_slice);
}

void TensorParallelCheckpointState::load_optimizer_state_dict(torch::optim::Optimizer& optimizer,
                                                              const StateDict& state, CheckpointLayout layout,
                                                              const std::string& what, const ParameterNamer& name_of,
                                                              const ShardedCheckpoint* slices) {
  if (!layout_.shards || layout_.shards->optimizer_layouts().count(&optimizer) == 0) {
    const auto mine = with_split_state(state, parameters_in_order(optimizer), layout_, whole_shape_of, slice_of_whole);
    return volt::load_optimizer_state_dict(optimizer, mine, what, name_of);
  }
  const auto& groups = layout_.shards->optimizer_layouts().at(&optimizer);
  const auto gathered = gathered_while();
  const auto mine =
      with_split_state(state, original_parameters(optimizer, groups), layout_, whole_shape_of, slice_of_whole);
  fsdp::load_consolidated_optimizer_state(optimizer, groups, mine, what, slices);
}

}  // namespace volt

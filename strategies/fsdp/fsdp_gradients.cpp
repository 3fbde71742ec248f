#include "strategies/fsdp/fsdp_gradients.h"

#include <set>

#include "core/error.h"
#include "strategies/sharded_gradient_norm.h"

namespace volt {

FSDPGradients::FSDPGradients(const PartContext& context, ProcessGroupContext& group,
                             std::shared_ptr<fsdp::FSDPState> state)
    : AveragingGradientSynchronization(context, group), state_(std::move(state)) {}

ScopeGuard FSDPGradients::no_sync() {
  const bool previous = state_->synchronize();
  state_->set_synchronize(false);
  return ScopeGuard([state = state_, previous] { state->set_synchronize(previous); });
}

void FSDPGradients::pre_backward(const torch::Tensor&) {
  state_->begin_backward();
  for (const auto& unit : state_->units()) unit->start_backward(state_->synchronize());
}

void FSDPGradients::post_backward(const torch::Tensor&) {
  for (const auto& unit : state_->units()) unit->finish_backward();
  if (auto* bucket = state_->bucket()) bucket->flush();  // before the step reads the shards' gradients
  state_->end_backward();
  state_->regather_root_inside_step();
}

void FSDPGradients::synchronize_accumulated_gradients(torch::nn::Module&) {
  for (const auto& unit : state_->units()) unit->reduce_held_gradients();
  if (auto* bucket = state_->bucket()) bucket->flush();
  state_->count_shard_gradients();
  // The closing micro-batch's step scope gathered the root (Note [The root unit inside a step])
  // and no backward released it: released now, the next forward gathers the values this window's
  // optimizer step writes, not the ones from before it (which it read when the root stayed
  // gathered: issue 34.5).
  state_->release_gathered_units();
}

torch::Tensor FSDPGradients::clip_norm(torch::optim::Optimizer& optimizer, double max_norm, double norm_type) {
  std::vector<torch::Tensor> parameters;
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) parameters.push_back(p);
  }
  // Each shard's elements are this rank's alone (padding has zero gradient); a parameter outside
  // the units is whole on every rank, which this sum would count N times: refuse rather than
  // report a wrong norm.
  std::set<const c10::TensorImpl*> shards;
  for (const auto& unit : state_->units()) {
    for (const auto& stepped : unit->flat().stepped_tensors()) shards.insert(stepped.unsafeGetTensorImpl());
  }
  for (const auto& p : parameters) {
    check<NotSupportedError>(shards.count(p.unsafeGetTensorImpl()) > 0, "fsdp: gradient clipping by norm needs "
                             "every parameter of the optimizer inside a unit; one of ", p.numel(),
                             " elements is not (a parameter that does not require grad at setup?)");
  }
  return clip_sharded_grad_norm(parameters, parameters, max_norm, norm_type, state_->shard_group(), "fsdp");
}

}  // namespace volt

#include "strategies/fsdp/fsdp_gradients.h"

#include <set>

#include "core/error.h"
#include "strategies/fsdp/fsdp_strategy.h"
#include "strategies/sharded_gradient_norm.h"

namespace volt {

FSDPGradients::FSDPGradients(FSDPStrategy& owner) : AveragingGradientSynchronization(owner, owner), fsdp_(owner) {}

ScopeGuard FSDPGradients::no_sync() {
  const bool previous = fsdp_.synchronize_;
  fsdp_.synchronize_ = false;
  return ScopeGuard([this, previous] { fsdp_.synchronize_ = previous; });
}

void FSDPGradients::pre_backward(const torch::Tensor&) {
  for (auto& unit : fsdp_.units_) unit->start_backward(fsdp_.synchronize_);
}

void FSDPGradients::post_backward(const torch::Tensor&) {
  for (auto& unit : fsdp_.units_) unit->finish_backward();
  if (fsdp_.bucket_) fsdp_.bucket_->flush();  // before the step reads the shards' gradients
  fsdp_.regather_root_inside_step();
}

void FSDPGradients::synchronize_accumulated_gradients(torch::nn::Module&) {
  for (auto& unit : fsdp_.units_) unit->reduce_held_gradients();
  if (fsdp_.bucket_) fsdp_.bucket_->flush();
  // The closing micro-batch's step scope gathered the root (Note [The root unit inside a step])
  // and no backward released it: released now, the next forward gathers the values this window's
  // optimizer step writes, not the ones from before it (which it read when the root stayed
  // gathered: issue 34.5).
  for (auto& unit : fsdp_.units_) {
    if (!unit->flat().prefetching()) unit->flat().release();
  }
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
  for (const auto& unit : fsdp_.units_) shards.insert(unit->flat().shard().unsafeGetTensorImpl());
  for (const auto& p : parameters) {
    check<NotSupportedError>(shards.count(p.unsafeGetTensorImpl()) > 0, "fsdp: gradient clipping by norm needs "
                             "every parameter of the optimizer inside a unit; one of ", p.numel(),
                             " elements is not (a parameter that does not require grad at setup?)");
  }
  return clip_sharded_grad_norm(parameters, parameters, max_norm, norm_type, fsdp_.shard_group(), "fsdp");
}

}  // namespace volt

#include "strategies/mesh_replica_parts.h"

namespace volt {

ScopeGuard ReplicaGradients::no_sync() {
  const bool outer = in_no_sync_;
  in_no_sync_ = true;
  return ScopeGuard([this, outer] { in_no_sync_ = outer; });
}

void ReplicaGradients::post_backward(const torch::Tensor& loss) {
  if (in_no_sync_ || module_ == nullptr) return;
  synchronize_accumulated_gradients(*module_);
}

void ReplicaGradients::synchronize_accumulated_gradients(torch::nn::Module& module) {
  if (replicated()) AveragingGradientSynchronization::synchronize_accumulated_gradients(module);
}

Placement::DataReplica ReplicaPlacement::data_replica() const {
  if (!mesh_) return Placement::data_replica();
  return {mesh_->coordinate("dp"), mesh_->size("dp")};
}

}  // namespace volt

#include "strategies/mesh_replica_parts.h"

#include "core/error.h"

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

int64_t model_parallel_size(const std::string& strategy, const std::string& option, int64_t value, int64_t world) {
  check<ConfigurationError>(value == 0 || world % value == 0, "--strategy ", strategy, ": ", option, "=", value,
                            " does not divide the ", world, " processes; the processes are ", option,
                            " x data-parallel replicas, so choose ", option,
                            " that divides them (or as many "
                            "processes as a multiple of it)");
  return value == 0 ? world : value;
}

Placement::DataReplica ReplicaPlacement::data_replica() const {
  if (!mesh_) return Placement::data_replica();
  return {mesh_->coordinate("dp"), mesh_->size("dp")};
}

}  // namespace volt

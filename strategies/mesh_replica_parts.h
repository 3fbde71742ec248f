#pragma once
// The parts of a strategy whose ranks form a ProcessMesh (distributed/process_mesh.h) with a `dp`
// dimension, the others (`pp`, `tp`) splitting one model among the ranks of one replica (the
// pipeline and tensor_parallel strategies): the ranks of a replica take the same batches, and
// after each backward outside no_sync() each rank's gradients are averaged over its `dp` group,
// the ranks holding the same part of the model (DDP's mean, over replicas).
#include <memory>

#include "distributed/process_mesh.h"
#include "strategies/averaging_gradient_synchronization.h"
#include "strategies/placement.h"

namespace volt {

class ReplicaGradients : public AveragingGradientSynchronization {
 public:
  // `mesh`: the strategy's, read when the part acts; `group` gives it the `dp` group as its
  // gradient_group().
  ReplicaGradients(const PartContext& context, ProcessGroupContext& group, const std::unique_ptr<ProcessMesh>& mesh)
      : AveragingGradientSynchronization(context, group), mesh_(mesh) {}
  // The module whose gradients it averages (setup_module); nullptr at teardown.
  void attach(torch::nn::Module* module) { module_ = module; }
  ScopeGuard no_sync() override;
  void post_backward(const torch::Tensor& loss) override;                      // [collective over dp]
  void synchronize_accumulated_gradients(torch::nn::Module& module) override;  // [collective over dp]

 private:
  bool replicated() const { return mesh_ && mesh_->size("dp") > 1; }
  const std::unique_ptr<ProcessMesh>& mesh_;
  torch::nn::Module* module_ = nullptr;
  bool in_no_sync_ = false;
};

// The size of the model-parallel dimension `option` (stages, tp) of `strategy` on `world`
// processes: `value`, or every process when it is 0. Throws ConfigurationError naming the fix when
// it does not divide them (the other processes are data-parallel replicas).
int64_t model_parallel_size(const std::string& strategy, const std::string& option, int64_t value, int64_t world);

class ReplicaPlacement : public Placement {
 public:
  ReplicaPlacement(const PartContext& context, const std::unique_ptr<ProcessMesh>& mesh)
      : Placement(context), mesh_(mesh) {}
  // The `dp` coordinate of the `dp` replicas (every rank its own before the mesh exists).
  DataReplica data_replica() const override;

 private:
  const std::unique_ptr<ProcessMesh>& mesh_;
};

}  // namespace volt

#pragma once
// The gradients part of the pipeline strategy (Note [The pipeline strategy]): at each
// synchronization the parts of a gradient computed on several stages are summed among them (Note
// [Parameters shared across stages]), then each stage's gradients are averaged over its `dp`
// group (ReplicaGradients).
#include <memory>

#include "strategies/mesh_replica_parts.h"
#include "strategies/pipeline/shared_stage_parameters.h"

namespace volt {

class PipelineGradients : public ReplicaGradients {
 public:
  // `shared`: the strategy's, read when the part acts (null: nothing shared).
  PipelineGradients(const PartContext& context, ProcessGroupContext& group, const std::unique_ptr<ProcessMesh>& mesh,
                    const std::unique_ptr<pipeline::SharedStageParameters>& shared)
      : ReplicaGradients(context, group, mesh), shared_(shared) {}
  // [point to point within pp, collective over dp]
  void synchronize_accumulated_gradients(torch::nn::Module& module) override;

 private:
  const std::unique_ptr<pipeline::SharedStageParameters>& shared_;
};

}  // namespace volt

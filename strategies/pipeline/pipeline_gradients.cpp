#include "strategies/pipeline/pipeline_gradients.h"

namespace volt {

void PipelineGradients::synchronize_accumulated_gradients(torch::nn::Module& module) {
  if (shared_) shared_->sum_gradients();
  ReplicaGradients::synchronize_accumulated_gradients(module);
}

}  // namespace volt

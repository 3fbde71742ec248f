#pragma once
// Note [Running a pipeline stage]
// One rank's part of a pipeline: its stage's entries of the model (stage_split.h), run over a
// batch's micro-batches in a schedule's order (Note [Pipeline schedules]), its activations and
// their gradients exchanged with the neighbouring stages by point-to-point sends over the
// pipeline's group (Note [Point to point]; stage s is rank s of that group, e.g. a ProcessMesh's
// `pp` group).
//
// A forward receives its input from the stage before (the first stage takes the micro-batch),
// runs the entries and sends the output on without waiting (the last stage computes the loss
// instead, divided by the number of micro-batches); a backward receives the output's gradient
// from the stage after (the last stage starts from its loss), runs autograd through the stage and
// sends the input's gradient back. Receives block, sends do not (they are waited for at the end
// of the step), which is what keeps a schedule's order free of deadlock. The parameters' gradients
// accumulate over the micro-batches in micro-batch order: the sum M-way accumulation of the whole
// batch makes on one process, in the same order, so the same bits.
//
// The shape and dtype of an activation travel once per step, before micro-batch 0's (a header of
// int64s); every micro-batch's activation must have the same (a batch is cut into equal
// micro-batches), which the sending stage checks.
#include <torch/torch.h>

#include <functional>
#include <vector>

#include "core/scope_guard.h"
#include "distributed/communicator.h"
#include "strategies/pipeline/pipeline_schedule.h"

namespace volt::pipeline {

using PipelineLoss = std::function<torch::Tensor(const torch::Tensor& output, const torch::Tensor& target)>;
// The region each forward (and the last stage's loss) runs in, e.g. the precision's autocast;
// backwards run outside it, as PyTorch recommends for autocast.
using ForwardScope = std::function<ScopeGuard()>;

// What the last step measured on this stage.
struct StageStepReport {
  double seconds = 0;                  // the step, from its first action to its sends completed
  double busy_seconds = 0;             // running forwards and backwards (not waiting to receive)
  int64_t peak_microbatches_held = 0;  // micro-batches whose activations were held at once
  double idle_fraction() const { return seconds > 0 ? 1.0 - busy_seconds / seconds : 0.0; }
};

class PipelineStage {
 public:
  // `module`: this stage's entries; `group`: the pipeline's ranks in stage order (this stage is
  // its rank); `device`: where the stage computes, which is where the activations it receives go.
  PipelineStage(torch::nn::Sequential module, Communicator& group, torch::Device device = torch::kCPU);

  int64_t stage() const { return group_.rank(); }
  int64_t stages() const { return group_.size(); }
  bool is_first() const { return stage() == 0; }
  bool is_last() const { return stage() == stages() - 1; }
  torch::nn::Sequential& module() { return module_; }

  // Runs one batch as M micro-batches under `schedule`: `inputs` (M tensors, the first stage's;
  // ignored elsewhere), `targets` (M tensors, the last stage's; ignored elsewhere), `loss` on the
  // last stage. Leaves the stage's parameters holding the gradient of the mean of the
  // micro-batches' losses (added to what they held). Returns that mean on the last stage,
  // undefined elsewhere. Every stage calls it with the same M and schedule.
  // [point to point with the neighbouring stages]
  torch::Tensor run(PipelineSchedule schedule, int64_t microbatches, const std::vector<torch::Tensor>& inputs,
                    const std::vector<torch::Tensor>& targets, const PipelineLoss& loss,
                    const ForwardScope& forward_scope = nullptr);

  const StageStepReport& last_step() const { return report_; }

 private:
  // The activation between this stage and the next (`outgoing`) or the one before: sent or
  // received as a header of its shape and dtype once per step.
  void send_header(const torch::Tensor& activation);
  torch::Tensor receive_like_header();

  torch::nn::Sequential module_;
  Communicator& group_;
  torch::Device device_;
  StageStepReport report_;
};

}  // namespace volt::pipeline

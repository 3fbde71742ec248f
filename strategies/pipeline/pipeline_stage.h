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
//
// Under interleaved_1f1b a rank runs V chunks, global stages s, s + S, ...: chunk v's output goes
// to rank s + 1's chunk v, and the last rank's to the first rank's chunk v + 1 (the gradients the
// other way), one header per chunk. On 2 ranks one direction then carries activations and
// gradients both (rank 0 to 1: activations within a chunk, and the gradients of rank 0's second
// chunk for rank 1's first). Messages between two ranks match in the order they are issued, so a
// shared channel would need the two kinds interleaved alike on both sides. The gradients go over a
// second group of the same ranks instead: each group and direction then carries one kind, in the
// schedule's forward (or backward) order restricted to that link, which is the same order on both
// ranks whatever S, V and M.
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
  // Interleaved: `chunks[v]` is global stage v·S + rank; `gradients` a second group of the same
  // ranks for the gradients (Note above).
  PipelineStage(std::vector<torch::nn::Sequential> chunks, Communicator& group, Communicator& gradients,
                torch::Device device = torch::kCPU);

  int64_t stage() const { return group_.rank(); }
  int64_t stages() const { return group_.size(); }
  int64_t chunks() const { return static_cast<int64_t>(chunks_.size()); }
  // Whether this rank runs the pipeline's first (last) stage: its first (last) chunk's.
  bool is_first() const { return stage() == 0; }
  bool is_last() const { return stage() == stages() - 1; }
  // The parameters of every chunk.
  std::vector<torch::Tensor> parameters() const;
  // Chunk v's entries; module() is chunk 0, the stage's entries when it has one chunk.
  torch::nn::Sequential& chunk(int64_t v) { return chunks_.at(static_cast<size_t>(v)); }
  torch::nn::Sequential& module() { return chunk(0); }

  // Runs one batch as M micro-batches under `schedule`: `inputs` (M tensors, the first stage's;
  // ignored elsewhere), `targets` (M tensors, the last stage's; ignored elsewhere), `loss` on the
  // last stage. Leaves the stage's parameters holding the gradient of the mean of the
  // micro-batches' losses (added to what they held). Returns that mean on the last stage,
  // undefined elsewhere. Every stage calls it with the same M and schedule, which must suit its
  // chunks (check_schedule_sizes).
  // [point to point with the neighbouring stages]
  torch::Tensor run(PipelineSchedule schedule, int64_t microbatches, const std::vector<torch::Tensor>& inputs,
                    const std::vector<torch::Tensor>& targets, const PipelineLoss& loss,
                    const ForwardScope& forward_scope = nullptr);

  const StageStepReport& last_step() const { return report_; }

 private:
  // The activation between a chunk and the next stage or the one before: sent or received as a
  // header of its shape and dtype once per step and chunk.
  void send_header(const torch::Tensor& activation, int64_t chunk);
  torch::Tensor receive_like_header();
  // Whether chunk v runs the pipeline's first (last) stage.
  bool first_stage(int64_t chunk) const { return is_first() && chunk == 0; }
  bool last_stage(int64_t chunk) const { return is_last() && chunk == chunks() - 1; }
  // The ranks chunks pass to: the next global stage's and the previous one's.
  int64_t next_rank() const { return (stage() + 1) % stages(); }
  int64_t previous_rank() const { return (stage() + stages() - 1) % stages(); }

  std::vector<torch::nn::Sequential> chunks_;
  Communicator& group_;
  Communicator& gradients_;
  torch::Device device_;
  StageStepReport report_;
};

}  // namespace volt::pipeline

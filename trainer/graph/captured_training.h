#pragma once
// The Trainer's captured step (--cuda-graph, docs/training_loop.md#captured-steps): how the fit
// loop's two phases run through StepCapture.
//
// Note [The Trainer's captured step]: the fit loop's step has two phases (Note [Capturing the
// step]): the micro-step (training_step on the batch's static copy, the loss scaled, backward,
// DDP's bucket all-reduces on NCCL inside it) and the optimizer step (unscale, clipping, the
// optimizers' steps, the GradScaler's update, zero_grad). Gradient accumulation gives the
// micro-step two graphs, one under no_sync and one that closes the window. The run is switched
// to its capturable modes (Note [A run a graph can replay]); the values training_step logs are
// recorded at capture and logged again after every replay; dropout's generator is registered
// with each graph (CapturedGraph); whether a step was skipped (16-mixed) is read on the host only
// when a step-interval LR scheduler must decide whether to advance.
// training_step's own C++ runs at the warm-up steps and at capture, not at replays. The hooks
// inside a phase (on_before_backward, on_after_backward, on_before_optimizer_step,
// on_before_zero_grad) would too, so a phase in which a callback or the module overrides one
// stays eager (Note [Hooks inside a captured phase]). Everything else (batch-level hooks,
// logging, validation, checkpoints, schedulers, stop conditions) runs on the host at every step,
// as without --cuda-graph.
#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "data/batch.h"
#include "run/graph/capturable_run.h"
#include "run/graph/step_capture.h"
#include "trainer/metrics/metric_collector.h"

namespace volt {

class Strategy;

class CapturedTraining {
 public:
  // Refuses what cannot be captured (CapturableRun::check_supported) and switches the run to its
  // capturable modes. `make_graph`: CUDA graphs on the strategy's device unless given.
  CapturedTraining(Strategy& strategy, bool automatic_optimization,
                   std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers, MetricCollector& collector,
                   StepCaptureOptions options = {}, StepCapture::GraphFactory make_graph = nullptr);

  // The micro-step for `batch`: `body` (training_step and backward, on the static copy of the
  // batch) runs eagerly, or is captured or replayed. A micro-step that closes its window and one
  // under no_sync are separate graphs; `window_size` (the loss's divisor) is part of the shape.
  // Returns the loss; after a capture or replay a detached copy the caller owns.
  torch::Tensor micro_step(const Batch& batch, bool closes_window, int64_t window_size,
                           const std::function<torch::Tensor(const Batch&)>& body);
  // The optimizer step of a window: `body` steps every optimizer, updates the precision and
  // zeroes the gradients. Returns, per optimizer, whether it stepped (false where the GradScaler
  // skipped the step: read on the host only when `need_decision`, else true).
  std::vector<bool> optimizer_step(const std::function<void()>& body, bool need_decision);

  const StepCapture& capture() const { return capture_; }

 private:
  CapturableRun run_;
  MetricCollector& collector_;
  StepCapture capture_;
  StaticBatch inputs_;
  // Per micro-step graph: what its capture logged, and its loss.
  struct MicroGraph {
    std::vector<LoggedValue> logged;
    torch::Tensor loss;
  };
  std::map<std::string, MicroGraph> micro_;
  size_t optimizer_count_;
};

}  // namespace volt

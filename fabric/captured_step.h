#pragma once
// A step of the user's own loop that FabricOptions::cuda_graph captures (docs/fabric.md#captured-steps):
//
//   auto train_step = fabric.captured_step([&](const volt::Batch& batch) {
//     auto loss = loss_fn(model->forward(batch.input), batch.target);
//     fabric.backward(loss);
//     fabric.step(*optimizer);
//     fabric.zero_grad(*optimizer);
//     return loss;
//   });
//   for (const auto& batch : *loader) auto loss = train_step(batch);
//
// With cuda_graph false, each call runs the step as written. With cuda_graph true, the calls
// follow Note [Capturing the step] as one phase: eager warm-up calls, then the step captured for
// the batch's shape and replayed, another shape run eagerly with one warning, and the run in its
// capturable modes (Note [A run a graph can replay]) while the CapturedStep lives. The step's
// host code runs at the warm-up calls and at capture only; the Fabric's own count of optimizer
// steps (global_step) advances at every replay as it did at capture. Under cuda_graph a skipped
// step (16-mixed) is decided on the device: Fabric::step returns true, and skipped() reads it.
#include <torch/torch.h>

#include <functional>
#include <memory>

#include "data/batch.h"
#include "run/graph/capturable_run.h"
#include "run/graph/step_capture.h"

namespace volt {

class Fabric;

class CapturedStep {
 public:
  using Step = std::function<torch::Tensor(const Batch& batch)>;
  // Fabric::captured_step builds it; `make_graph` (tests) replaces CUDA graphs.
  CapturedStep(Fabric& fabric, Step step, std::shared_ptr<CapturableRun> run, StepCaptureOptions options = {},
               StepCapture::GraphFactory make_graph = nullptr);

  // Runs the step on `batch` and returns the loss it returned (after a capture or replay, a
  // detached copy the caller owns).
  torch::Tensor operator()(const Batch& batch);
  // Whether the GradScaler skipped the last call's optimizer steps (reads the device); false
  // without cuda_graph (Fabric::last_step_skipped says it then) and without a GradScaler.
  bool skipped() const;
  const StepCapture* capture() const { return capture_.get(); }

 private:
  Fabric& fabric_;
  Step step_;
  std::shared_ptr<CapturableRun> run_;  // null: eager
  std::unique_ptr<StepCapture> capture_;
  StaticBatch inputs_;
  torch::Tensor loss_;             // the captured step's
  int64_t steps_per_call_ = 0;     // optimizer steps the Fabric counted during the capture
};

}  // namespace volt

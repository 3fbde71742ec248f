#include "fabric/captured_step.h"

#include "core/error.h"
#include "fabric/fabric.h"

namespace volt {

CapturedStep::CapturedStep(Fabric& fabric, Step step, std::shared_ptr<CapturableRun> run, StepCaptureOptions options,
                           StepCapture::GraphFactory make_graph)
    : fabric_(fabric), step_(std::move(step)), run_(std::move(run)) {
  check<ConfigurationError>(step_ != nullptr, "Fabric::captured_step: expected a step function, got an empty one");
  if (!run_) return;
  if (!make_graph) make_graph = [device = fabric.strategy().root_device()] { return make_cuda_graph(device); };
  capture_ = std::make_unique<StepCapture>(std::move(options), std::move(make_graph));
}

torch::Tensor CapturedStep::operator()(const Batch& batch) {
  if (!run_) return step_(batch);
  run_->refresh_learning_rates();
  const Batch& input = inputs_.copy_in(batch);
  torch::Tensor eager_loss;
  const auto ran = capture_->run("step", StaticBatch::signature(batch), [&](bool capturing) {
    if (!capturing) {
      eager_loss = step_(input);
      return;
    }
    const int64_t before = fabric_.global_step();
    loss_ = step_(input);
    steps_per_call_ = fabric_.global_step() - before;
  });
  switch (ran) {
    case StepCapture::Ran::Eagerly:
      return eager_loss;
    case StepCapture::Ran::Replayed:
      fabric_.advance_global_step(steps_per_call_);  // the capture counted its own
      [[fallthrough]];
    case StepCapture::Ran::Captured:
      return loss_.defined() ? loss_.detach().clone() : torch::Tensor();
  }
  return {};
}

bool CapturedStep::skipped() const {
  if (!run_) return false;
  const auto stepped = run_->stepped();
  return !stepped.empty() && !stepped.front();
}

}  // namespace volt

#include "trainer/graph/captured_training.h"

#include "core/scope_guard.h"
#include "strategies/strategy.h"

namespace volt {

CapturedTraining::CapturedTraining(Strategy& strategy, bool automatic_optimization,
                                   std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers,
                                   MetricCollector& collector, StepCaptureOptions options,
                                   StepCapture::GraphFactory make_graph)
    : run_(strategy, automatic_optimization, optimizers),
      collector_(collector),
      capture_(std::move(options), make_graph ? std::move(make_graph) : [device = strategy.root_device()] {
        return make_cuda_graph(device);
      }),
      optimizer_count_(optimizers.size()) {}

torch::Tensor CapturedTraining::micro_step(const Batch& batch, bool closes_window, int64_t window_size,
                                           const std::function<torch::Tensor(const Batch&)>& body) {
  const std::string phase = closes_window ? "micro-step" : "micro-step under no_sync";
  const std::string key = StaticBatch::signature(batch) + "; window of " + std::to_string(window_size);
  MicroGraph& graph = micro_[phase];
  const Batch& input = inputs_.copy_in(batch);
  torch::Tensor loss;
  const auto ran = capture_.run(phase, key, [&](bool capturing) {
    if (!capturing) {
      loss = body(input);
      return;
    }
    graph.logged.clear();
    collector_.record_into(&graph.logged);
    ScopeGuard stop_recording([this] { collector_.record_into(nullptr); });
    graph.loss = body(input);
  });
  if (ran == StepCapture::Ran::Eagerly) return loss;
  // The replay ran training_step's device work, not its log() calls: log what the capture
  // recorded, copied out of the graph's memory, which the next replay rewrites.
  collector_.set_in_step(true, batch.size());
  for (const auto& logged : graph.logged) collector_.log(logged.name, logged.value.clone(), logged.options);
  collector_.set_in_step(false);
  return graph.loss.defined() ? graph.loss.detach().clone() : torch::Tensor();
}

std::vector<bool> CapturedTraining::optimizer_step(const std::function<void()>& body, bool need_decision) {
  run_.refresh_learning_rates();
  capture_.run("optimizer step", "every optimizer", [&](bool) { body(); });
  return need_decision ? run_.stepped() : std::vector<bool>(optimizer_count_, true);
}

}  // namespace volt

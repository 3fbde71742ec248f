#include "trainer/loops/loop_hooks.h"

#include "core/named_scope.h"
#include "trainer/module.h"

namespace volt {

void backward_with_hooks(const LoopContext& context, Module& module, const torch::Tensor& loss) {
  Trainer& trainer = context.trainer;
  NamedScope scope("volt::backward");
  call_in_step_callbacks(trainer, module, "on_before_backward", &Callback::on_before_backward, loss);
  probe_in_step_hook(the_module, "on_before_backward", [&] { module.on_before_backward(loss); });
  context.strategy.backward(loss);
  call_in_step_callbacks(trainer, module, "on_after_backward", &Callback::on_after_backward);
  probe_in_step_hook(the_module, "on_after_backward", [&] { module.on_after_backward(); });
}

bool step_optimizer_with_hooks(const LoopContext& context, Module& module, torch::optim::Optimizer& optimizer,
                               const std::function<void(torch::optim::Optimizer&)>& clip) {
  Trainer& trainer = context.trainer;
  NamedScope scope("volt::optimizer_step");
  return context.strategy.optimizer_step(optimizer, [&](torch::optim::Optimizer& o) {
    call_in_step_callbacks(trainer, module, "on_before_optimizer_step", &Callback::on_before_optimizer_step, o);
    probe_in_step_hook(the_module, "on_before_optimizer_step", [&] { module.on_before_optimizer_step(o); });
    if (clip) clip(o);
  });
}

torch::Tensor clip_gradients(Strategy& strategy, torch::optim::Optimizer& optimizer, double value,
                                     GradientClipAlgorithm algorithm) {
  NamedScope scope("volt::clip_gradients");
  if (algorithm == GradientClipAlgorithm::Value) {
    strategy.clip_gradients_value(optimizer, value);
    return {};
  }
  return strategy.clip_gradients_norm(optimizer, value);
}

bool loggers_active(const Trainer& trainer) { return !trainer.loggers().empty() && trainer.is_global_zero(); }

void publish_metrics(const Trainer& trainer, LoopState& state, const MetricValues& values, bool to_loggers) {
  for (const auto& [name, value] : values.callback) state.callback_metrics.set(name, value);
  for (const auto& [name, value] : values.prog_bar) state.progress_bar_metrics.set(name, value);
  if (to_loggers && !values.logger.empty()) log_to_loggers(trainer, state, read_metrics(values.logger));
}

void log_to_loggers(const Trainer& trainer, LoopState& state, std::map<std::string, double> metrics) {
  NamedScope scope("volt::loggers");
  metrics["epoch"] = static_cast<double>(state.progress.epoch);
  for (const auto& [name, value] : metrics) state.logged_metrics.set(name, value);
  if (!loggers_active(trainer)) return;
  for (const auto& logger : trainer.loggers()) logger->log_metrics(metrics, state.progress.global_step);
}

}  // namespace volt

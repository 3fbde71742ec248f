#pragma once
// What the loops and the checkpoint connector do through the Trainer's public side: call the
// callbacks' hooks, and publish metrics to the Trainer's maps and its loggers (Note [Loop state]).
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "callbacks/callback.h"
#include "core/in_step_hook_probe.h"
#include "trainer/loops/loop_context.h"
#include "trainer/loops/loop_state.h"
#include "trainer/metrics/metric_collector.h"
#include "trainer/trainer.h"
#include "strategies/strategy.h"

namespace volt {

// Calls `hook` on every callback of `trainer`, in the order they were added.
template <typename... HookArgs, typename... Args>
void call_callbacks(Trainer& trainer, Module& module, void (Callback::*hook)(Trainer&, Module&, HookArgs...),
                    Args&&... args) {
  for (const auto& callback : trainer.callbacks()) ((*callback).*hook)(trainer, module, args...);
}

// How a probe's notes name the module's own hooks.
inline std::string the_module() { return "the module"; }

// call_callbacks for a hook inside a step (`name`), each call watched by the InStepHookProbe
// active on this thread, if any (Note [Hooks inside a captured phase]).
template <typename... HookArgs, typename... Args>
void call_in_step_callbacks(Trainer& trainer, Module& module, const char* name,
                            void (Callback::*hook)(Trainer&, Module&, HookArgs...), Args&&... args) {
  for (const auto& callback : trainer.callbacks()) {
    probe_in_step_hook([&] { return "callback " + callback->state_key(); }, name,
                       [&] { ((*callback).*hook)(trainer, module, args...); });
  }
}

// The strategy's backward of `loss` (the precision's scaling, the gradient reduction) between the
// on_before_backward and on_after_backward hooks (callbacks, then the module). The automatic loop
// and Module::manual_backward both run backward this way.
void backward_with_hooks(const LoopContext& context, Module& module, const torch::Tensor& loss);

// One optimizer step through the strategy, with the on_before_optimizer_step hooks (callbacks,
// then the module) and then `clip` (may be empty) between the unscaling and the step; returns
// whether the step was taken. The automatic loop and ManualOptimizer::step both step this way.
bool step_optimizer_with_hooks(const LoopContext& context, Module& module, torch::optim::Optimizer& optimizer,
                               const std::function<void(torch::optim::Optimizer&)>& clip);

// Clips `optimizer`'s gradients to `value` by `algorithm` through the strategy (at their true scale);
// returns the total norm before clipping (Norm, a 0-dim tensor not read on the host) or an undefined
// tensor (Value). --gradient-clip-val and Module::clip_gradients both clip this way.
torch::Tensor clip_gradients(Strategy& strategy, torch::optim::Optimizer& optimizer, double value,
                                     GradientClipAlgorithm algorithm);

// The module a strategy handed a step function (StepFunction): `running` itself, or a replica of it
// (a strategy that runs several in one process), which then runs in the same loop as `running`, so
// that its log() calls count. Throws InternalError for a module that is not a volt::Module.
Module& step_module(torch::nn::Module& given, Module& running);

// Whether this process writes to the loggers: it has some, and it is global rank 0.
bool loggers_active(const Trainer& trainer);

// Merges `values` into the state's callback and progress-bar metrics and, with `to_loggers`, sends
// values.logger to the loggers.
void publish_metrics(const Trainer& trainer, LoopState& state, const MetricValues& values, bool to_loggers);

// Sends `metrics` (with the epoch added) to the loggers at the current global step, and keeps them
// as the state's logged metrics.
void log_to_loggers(const Trainer& trainer, LoopState& state, std::map<std::string, double> metrics);

}  // namespace volt

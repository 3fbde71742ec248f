#include "run/graph/step_capture.h"

#include <sstream>

#include "core/error.h"
#include "core/host_sync_observer.h"
#include "core/warning.h"
#include "core/in_step_hook_probe.h"

namespace volt {

StepCapture::StepCapture(StepCaptureOptions options, GraphFactory make_graph)
    : options_(std::move(options)), make_graph_(std::move(make_graph)) {
  check<ConfigurationError>(options_.warmup_steps >= 1, options_.flag, ": expected at least 1 eager warm-up step, got ",
                            options_.warmup_steps);
  VOLT_INTERNAL_ASSERT(make_graph_ != nullptr, "StepCapture needs a graph factory");
}

StepCapture::Ran StepCapture::run_eagerly(Phase& phase, const std::string& name, const Body& body, bool watch) {
  if (!watch) {
    body(false);
    return Ran::Eagerly;
  }
  HostSyncObserver observer(/*this_thread_only=*/true);
  InStepHookProbe hooks;
  body(false);
  const auto sites = observer.sites();
  if (!hooks.overridden().empty()) {
    std::string names;
    for (const auto& hook : hooks.overridden()) names += (names.empty() ? "" : ", ") + hook;
    phase.eager_reason = "the " + name + " calls hooks that are overridden (" + names + ")";
    warn(options_.flag + ": " + *phase.eager_reason +
         "; a replay runs no C++, so they would run at capture only. The phase runs eagerly for the rest of "
         "the run; move such work to on_train_batch_start/end, or drop the override, to capture it");
  } else if (!sites.empty()) {
    const std::string site = sites.front().empty() ? "outside volt's scopes" : "in " + sites.front();
    phase.eager_reason = "the " + name + " read a value on the host (" + site + ")";
    warn(options_.flag + ": " + *phase.eager_reason +
         ", which a CUDA graph cannot hold, so it runs eagerly for the rest of the run; log tensors "
         "rather than numbers, and read values in callbacks outside the step, to capture it");
  }
  return Ran::Eagerly;
}

StepCapture::Ran StepCapture::run(const std::string& name, const std::string& key, const Body& body) {
  Phase& phase = phases_[name];
  if (phase.eager_reason) return run_eagerly(phase, name, body, false);
  if (phase.graph) {
    if (key == phase.key) {
      phase.graph->replay();
      return Ran::Replayed;
    }
    if (!phase.warned_other_shape) {
      phase.warned_other_shape = true;
      warn(options_.flag + ": the " + name + " was captured for inputs " + phase.key + "; a call with " + key +
           " runs eagerly (as will any other shape; this is said once)");
    }
    return run_eagerly(phase, name, body, false);
  }
  if (phase.eager_calls < options_.warmup_steps) {
    ++phase.eager_calls;
    return run_eagerly(phase, name, body, true);
  }
  auto graph = make_graph_();
  try {
    graph->capture([&] { body(true); });
  } catch (const NotSupportedError& error) {
    throw NotSupportedError(options_.flag + ": the " + name + " for inputs " + key + ": " + error.what() +
                            ". Run without " + options_.flag + ", or keep the step to device work");
  }
  phase.graph = std::move(graph);
  phase.key = key;
  phase.graph->replay();
  return Ran::Captured;
}

std::optional<std::string> StepCapture::eager_reason(const std::string& name) const {
  const auto it = phases_.find(name);
  return it == phases_.end() ? std::nullopt : it->second.eager_reason;
}

bool StepCapture::captured(const std::string& name) const {
  const auto it = phases_.find(name);
  return it != phases_.end() && it->second.graph != nullptr;
}

std::string StaticBatch::signature(const Batch& batch) {
  std::ostringstream out;
  auto describe = [&](const std::string& name, const torch::Tensor& t) {
    if (!t.defined()) return;
    if (out.tellp() > 0) out << "; ";
    out << name << ' ' << t.scalar_type() << t.sizes() << ' ' << t.device();
  };
  describe("input", batch.input);
  describe("target", batch.target);
  for (const auto& [name, t] : batch.extras) describe(name, t);
  return out.str();
}

const Batch& StaticBatch::copy_in(const Batch& batch) {
  auto [it, inserted] = buffers_.try_emplace(signature(batch));
  Batch& buffer = it->second;
  auto fill = [](torch::Tensor& into, const torch::Tensor& from) {
    if (!from.defined()) return;
    if (!into.defined()) into = torch::empty_like(from, torch::MemoryFormat::Contiguous);
    into.copy_(from, /*non_blocking=*/true);
  };
  fill(buffer.input, batch.input);
  fill(buffer.target, batch.target);
  for (const auto& [name, t] : batch.extras) fill(buffer.extras[name], t);
  return buffer;
}

}  // namespace volt

#include "strategies/pipeline/pipeline_schedule.h"

#include <algorithm>
#include <limits>
#include <map>

#include "core/error.h"

namespace volt::pipeline {

PipelineSchedule parse_pipeline_schedule(const std::string& text) {
  if (text == "gpipe") return PipelineSchedule::GPipe;
  if (text == "1f1b") return PipelineSchedule::OneFOneB;
  throw ConfigurationError("pipeline: schedule=" + text + " is not a schedule; use gpipe or 1f1b");
}

std::string to_string(PipelineSchedule schedule) { return schedule == PipelineSchedule::GPipe ? "gpipe" : "1f1b"; }

std::vector<PipelineAction> stage_actions(PipelineSchedule schedule, int64_t stage, int64_t stages,
                                          int64_t microbatches) {
  VOLT_INTERNAL_ASSERT(stages >= 1 && stage >= 0 && stage < stages && microbatches >= 1,
                       "stage_actions: a stage of the pipeline and at least one micro-batch");
  using Kind = PipelineAction::Kind;
  std::vector<PipelineAction> actions;
  if (schedule == PipelineSchedule::GPipe) {
    for (int64_t i = 0; i < microbatches; ++i) actions.push_back({Kind::Forward, i});
    for (int64_t i = 0; i < microbatches; ++i) actions.push_back({Kind::Backward, i});
    return actions;
  }
  const int64_t warmup = std::min(microbatches, stages - stage - 1);
  int64_t forward = 0, backward = 0;
  for (; forward < warmup; ++forward) actions.push_back({Kind::Forward, forward});
  while (forward < microbatches) {  // steady state: one forward, then the oldest backward
    actions.push_back({Kind::Forward, forward++});
    actions.push_back({Kind::Backward, backward++});
  }
  for (; backward < microbatches; ++backward) actions.push_back({Kind::Backward, backward});
  return actions;
}

int64_t peak_microbatches_held(const std::vector<PipelineAction>& actions) {
  int64_t held = 0, peak = 0;
  for (const auto& action : actions) {
    held += action.kind == PipelineAction::Kind::Forward ? 1 : -1;
    peak = std::max(peak, held);
  }
  return peak;
}

double SimulatedPipeline::bubble_fraction() const {
  if (busy.empty() || makespan <= 0) return 0;
  double idle = 0;
  for (const double b : busy) idle += 1.0 - b / makespan;
  return idle / static_cast<double>(busy.size());
}

SimulatedPipeline simulate_pipeline(PipelineSchedule schedule, int64_t stages, int64_t microbatches,
                                    double forward_time, double backward_time) {
  using Kind = PipelineAction::Kind;
  std::vector<std::vector<PipelineAction>> actions;
  for (int64_t s = 0; s < stages; ++s) actions.push_back(stage_actions(schedule, s, stages, microbatches));
  // When each (stage, kind, micro-batch) ended; an action needs its input: F i of stage s-1, B i
  // of stage s+1 (the last stage's B i its own F i).
  std::map<std::tuple<int64_t, Kind, int64_t>, double> ended;
  std::vector<size_t> next(static_cast<size_t>(stages), 0);
  std::vector<double> free_at(static_cast<size_t>(stages), 0.0);
  SimulatedPipeline out;
  out.busy.assign(static_cast<size_t>(stages), 0.0);
  size_t remaining = static_cast<size_t>(stages * microbatches * 2);
  while (remaining > 0) {
    bool progressed = false;
    for (int64_t s = 0; s < stages; ++s) {
      auto& i = next[static_cast<size_t>(s)];
      if (i == actions[static_cast<size_t>(s)].size()) continue;
      const auto& action = actions[static_cast<size_t>(s)][i];
      const bool forward = action.kind == Kind::Forward;
      double ready = 0;
      if (forward && s > 0) {
        const auto it = ended.find({s - 1, Kind::Forward, action.microbatch});
        if (it == ended.end()) continue;
        ready = it->second;
      }
      if (!forward) {
        const auto it = s + 1 < stages ? ended.find({s + 1, Kind::Backward, action.microbatch})
                                       : ended.find({s, Kind::Forward, action.microbatch});
        if (it == ended.end()) continue;
        ready = it->second;
      }
      const double start = std::max(ready, free_at[static_cast<size_t>(s)]);
      const double duration = forward ? forward_time : backward_time;
      free_at[static_cast<size_t>(s)] = start + duration;
      out.busy[static_cast<size_t>(s)] += duration;
      ended[{s, action.kind, action.microbatch}] = start + duration;
      out.makespan = std::max(out.makespan, start + duration);
      ++i;
      --remaining;
      progressed = true;
    }
    VOLT_INTERNAL_ASSERT(progressed, "simulate_pipeline: the ", to_string(schedule),
                         " order deadlocks (every stage waits for another)");
  }
  return out;
}

double bubble_formula(int64_t stages, int64_t microbatches) {
  return static_cast<double>(stages - 1) / static_cast<double>(microbatches + stages - 1);
}

}  // namespace volt::pipeline

#include "strategies/pipeline/pipeline_schedule.h"

#include <algorithm>
#include <limits>
#include <map>

#include "core/error.h"

namespace volt::pipeline {

PipelineSchedule parse_pipeline_schedule(const std::string& text) {
  if (text == "gpipe") return PipelineSchedule::GPipe;
  if (text == "1f1b") return PipelineSchedule::OneFOneB;
  if (text == "interleaved_1f1b") return PipelineSchedule::Interleaved1F1B;
  throw ConfigurationError("pipeline: schedule=" + text + " is not a schedule; use gpipe, 1f1b or interleaved_1f1b");
}

std::string to_string(PipelineSchedule schedule) {
  switch (schedule) {
    case PipelineSchedule::GPipe:
      return "gpipe";
    case PipelineSchedule::OneFOneB:
      return "1f1b";
    case PipelineSchedule::Interleaved1F1B:
      return "interleaved_1f1b";
  }
  return "?";
}

void check_schedule_sizes(PipelineSchedule schedule, int64_t stages, int64_t microbatches, int64_t chunks) {
  check<ConfigurationError>(microbatches >= 1, "pipeline: microbatches=", microbatches, "; at least one");
  if (schedule != PipelineSchedule::Interleaved1F1B) {
    check<ConfigurationError>(chunks == 1, "pipeline: virtual_stages=", chunks, " with schedule=", to_string(schedule),
                              ", which runs one chunk a rank; use schedule=interleaved_1f1b, or virtual_stages=1");
    return;
  }
  check<ConfigurationError>(chunks >= 2, "pipeline: schedule=interleaved_1f1b with virtual_stages=", chunks,
                            "; give each rank at least 2 chunks (virtual_stages=2), or use schedule=1f1b");
  check<ConfigurationError>(stages >= 2, "pipeline: schedule=interleaved_1f1b on one stage has nothing to ",
                            "interleave; use 2 or more stages, or schedule=1f1b");
  check<ConfigurationError>(microbatches % stages == 0, "pipeline: schedule=interleaved_1f1b takes the micro-batches ",
                            stages, " at a time (one per stage), and microbatches=", microbatches,
                            " is no multiple of stages=", stages, "; choose a multiple");
}

namespace {

// The k-th forward (or backward) of a rank under interleaved_1f1b: micro-batches in rounds of S,
// each round through the chunks in order (the backwards: in reverse).
PipelineAction interleaved(PipelineAction::Kind kind, int64_t k, int64_t stages, int64_t chunks) {
  const int64_t round = k / (stages * chunks), chunk = k / stages % chunks;
  return {kind, round * stages + k % stages, kind == PipelineAction::Kind::Forward ? chunk : chunks - 1 - chunk};
}

}  // namespace

std::vector<PipelineAction> stage_actions(PipelineSchedule schedule, int64_t stage, int64_t stages,
                                          int64_t microbatches, int64_t chunks) {
  VOLT_INTERNAL_ASSERT(stages >= 1 && stage >= 0 && stage < stages,
                       "stage_actions: a stage of the pipeline");
  check_schedule_sizes(schedule, stages, microbatches, chunks);
  using Kind = PipelineAction::Kind;
  std::vector<PipelineAction> actions;
  if (schedule == PipelineSchedule::GPipe) {
    for (int64_t i = 0; i < microbatches; ++i) actions.push_back({Kind::Forward, i});
    for (int64_t i = 0; i < microbatches; ++i) actions.push_back({Kind::Backward, i});
    return actions;
  }
  // 1F1B, interleaved or not: warm-up forwards, then one forward and the oldest backward in turn.
  const int64_t total = microbatches * chunks;
  const int64_t warmup = schedule == PipelineSchedule::OneFOneB
                             ? std::min(microbatches, stages - stage - 1)
                             : std::min(total, 2 * (stages - stage - 1) + (chunks - 1) * stages);
  const auto nth = [&](Kind kind, int64_t k) {
    return schedule == PipelineSchedule::OneFOneB ? PipelineAction{kind, k} : interleaved(kind, k, stages, chunks);
  };
  int64_t forward = 0, backward = 0;
  for (; forward < warmup; ++forward) actions.push_back(nth(Kind::Forward, forward));
  while (forward < total) {
    actions.push_back(nth(Kind::Forward, forward++));
    actions.push_back(nth(Kind::Backward, backward++));
  }
  for (; backward < total; ++backward) actions.push_back(nth(Kind::Backward, backward));
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
                                    double forward_time, double backward_time, int64_t chunks) {
  using Kind = PipelineAction::Kind;
  std::vector<std::vector<PipelineAction>> actions;
  for (int64_t s = 0; s < stages; ++s) actions.push_back(stage_actions(schedule, s, stages, microbatches, chunks));
  // When each (global stage, kind, micro-batch) ended; global stage g = chunk·S + rank. An action
  // needs its input: F i of stage g-1, B i of stage g+1 (the last stage's B i its own F i).
  const int64_t last = stages * chunks - 1;
  std::map<std::tuple<int64_t, Kind, int64_t>, double> ended;
  std::vector<size_t> next(static_cast<size_t>(stages), 0);
  std::vector<double> free_at(static_cast<size_t>(stages), 0.0);
  SimulatedPipeline out;
  out.busy.assign(static_cast<size_t>(stages), 0.0);
  size_t remaining = static_cast<size_t>(stages * microbatches * chunks * 2);
  while (remaining > 0) {
    bool progressed = false;
    for (int64_t s = 0; s < stages; ++s) {
      auto& i = next[static_cast<size_t>(s)];
      if (i == actions[static_cast<size_t>(s)].size()) continue;
      const auto& action = actions[static_cast<size_t>(s)][i];
      const bool forward = action.kind == Kind::Forward;
      const int64_t g = action.chunk * stages + s;
      double ready = 0;
      if (forward && g > 0) {
        const auto it = ended.find({g - 1, Kind::Forward, action.microbatch});
        if (it == ended.end()) continue;
        ready = it->second;
      }
      if (!forward) {
        const auto it = g < last ? ended.find({g + 1, Kind::Backward, action.microbatch})
                                 : ended.find({g, Kind::Forward, action.microbatch});
        if (it == ended.end()) continue;
        ready = it->second;
      }
      const double start = std::max(ready, free_at[static_cast<size_t>(s)]);
      const double duration = (forward ? forward_time : backward_time) / static_cast<double>(chunks);
      free_at[static_cast<size_t>(s)] = start + duration;
      out.busy[static_cast<size_t>(s)] += duration;
      ended[{g, action.kind, action.microbatch}] = start + duration;
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

double bubble_formula(int64_t stages, int64_t microbatches, int64_t chunks) {
  return static_cast<double>(stages - 1) / static_cast<double>(chunks * microbatches + stages - 1);
}

}  // namespace volt::pipeline

#pragma once
// Note [Pipeline schedules]
// A pipeline of S stages runs a batch as M micro-batches: stage s takes micro-batch i's
// activation from stage s-1, runs its part of the model and passes the result to stage s+1; the
// last stage computes the loss; the gradients travel back the same way. A schedule is the order
// in which each stage runs its M forwards (F i) and M backwards (B i):
//
//   gpipe: F 0, F 1, ..., F M-1, then B 0, ..., B M-1 (GPipe; PyTorch's ScheduleGPipe). Every
//          stage holds all M micro-batches' activations before its first backward.
//   1f1b:  S-s-1 forwards ("warm-up"), then alternately one forward and one backward, then the
//          backwards left (PipeDream-Flush; PyTorch's Schedule1F1B). Stage s holds at most S-s
//          micro-batches' activations at once, S on the first stage, whatever M.
//
// Both run the backwards of a stage in micro-batch order, so a parameter's gradient is the same
// sum, in the same order, as M-way accumulation on one process. With a forward taking f and a
// backward b on every stage, both take (M + S - 1)·(f + b) and leave each stage idle for
// (S - 1)·(f + b) of it: the bubble, a fraction (S - 1) / (M + S - 1). simulate_pipeline runs a
// schedule under those assumptions (each action starts when its stage is free and its input has
// arrived), which checks that a schedule's order is one the stages can keep, and gives the
// bubble to compare a measured one against.
#include <cstdint>
#include <string>
#include <vector>

namespace volt::pipeline {

enum class PipelineSchedule { GPipe, OneFOneB };

// "gpipe" or "1f1b" (ConfigurationError naming both otherwise).
PipelineSchedule parse_pipeline_schedule(const std::string& text);
std::string to_string(PipelineSchedule schedule);

struct PipelineAction {
  enum class Kind { Forward, Backward };
  Kind kind = Kind::Forward;
  int64_t microbatch = 0;
  bool operator==(const PipelineAction& other) const = default;
};

// Stage `stage`'s actions, in order, for `stages` stages and `microbatches` micro-batches.
std::vector<PipelineAction> stage_actions(PipelineSchedule schedule, int64_t stage, int64_t stages,
                                          int64_t microbatches);

// The most micro-batches whose activations a stage holds at once under its actions (forwards run
// and not yet backwarded).
int64_t peak_microbatches_held(const std::vector<PipelineAction>& actions);

struct SimulatedPipeline {
  double makespan = 0;             // when the last action ends
  std::vector<double> busy;        // per stage: time spent running actions
  double bubble_fraction() const;  // mean over the stages of 1 - busy / makespan
};

// Runs every stage's actions under `schedule` with forwards taking `forward_time` and backwards
// `backward_time` and transfers taking none. InternalError when the order deadlocks (a stage's
// next action waits for one that waits for it).
SimulatedPipeline simulate_pipeline(PipelineSchedule schedule, int64_t stages, int64_t microbatches,
                                    double forward_time = 1.0, double backward_time = 2.0);

// (S - 1) / (M + S - 1): the bubble of either schedule with equal stages.
double bubble_formula(int64_t stages, int64_t microbatches);

}  // namespace volt::pipeline

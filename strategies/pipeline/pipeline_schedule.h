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
//   interleaved_1f1b: each rank holds V chunks of the model, not one: the model is cut into S·V
//          stages and rank s runs stages s, s + S, ..., s + (V-1)·S (Megatron-LM's virtual
//          stages; PyTorch's ScheduleInterleaved1F1B), so a micro-batch passes every rank V
//          times, the last rank handing it back to the first. M must be a multiple of S. A
//          rank's forwards take the micro-batches S at a time: micro-batches 0..S-1 through its
//          chunk 0, then through chunk 1, ..., chunk V-1, then micro-batches S..2S-1 through
//          chunk 0, and so on; its backwards the same with the chunks in reverse. It runs
//          min(M·V, 2·(S-s-1) + (V-1)·S) forwards first, then alternately one forward and one
//          backward, then the backwards left. The bubble shrinks V times, for V times the
//          point-to-point messages and more activations held (up to M·V early on).
//
// Every schedule runs the backwards of a chunk in micro-batch order, so a parameter's gradient is
// the same sum, in the same order, as M-way accumulation on one process. With a forward taking f
// and a backward b on every rank (f / V and b / V a chunk), gpipe and 1f1b take (M + S - 1)·(f + b)
// and leave each stage idle for (S - 1)·(f + b) of it: the bubble, a fraction (S - 1) / (M + S - 1);
// interleaving makes the idle time (S - 1)·(f + b) / V, a fraction (S - 1) / (V·M + S - 1).
// simulate_pipeline runs a schedule under those assumptions (each action starts when its rank is
// free and its input has arrived), which checks that a schedule's order is one the ranks can keep,
// and gives the bubble to compare a measured one against.
#include <cstdint>
#include <string>
#include <vector>

namespace volt::pipeline {

enum class PipelineSchedule { GPipe, OneFOneB, Interleaved1F1B };

// "gpipe", "1f1b" or "interleaved_1f1b" (ConfigurationError naming them otherwise).
PipelineSchedule parse_pipeline_schedule(const std::string& text);
std::string to_string(PipelineSchedule schedule);

struct PipelineAction {
  enum class Kind { Forward, Backward };
  Kind kind = Kind::Forward;
  int64_t microbatch = 0;
  int64_t chunk = 0;  // which of the rank's chunks (0 but under interleaved_1f1b)
  bool operator==(const PipelineAction& other) const = default;
};

// Rank `stage`'s actions, in order, for `stages` ranks, `microbatches` micro-batches and `chunks`
// chunks a rank (V: 1 but under interleaved_1f1b, which needs V >= 2, S >= 2 and M a multiple of
// S; ConfigurationError naming the fix otherwise).
std::vector<PipelineAction> stage_actions(PipelineSchedule schedule, int64_t stage, int64_t stages,
                                          int64_t microbatches, int64_t chunks = 1);
// The checks stage_actions makes of a schedule's sizes (ConfigurationError naming the fix).
void check_schedule_sizes(PipelineSchedule schedule, int64_t stages, int64_t microbatches, int64_t chunks);

// The most micro-batches whose activations a stage holds at once under its actions (forwards run
// and not yet backwarded).
int64_t peak_microbatches_held(const std::vector<PipelineAction>& actions);

struct SimulatedPipeline {
  double makespan = 0;             // when the last action ends
  std::vector<double> busy;        // per stage: time spent running actions
  double bubble_fraction() const;  // mean over the stages of 1 - busy / makespan
};

// Runs every rank's actions under `schedule` with a rank's forward taking `forward_time` and its
// backward `backward_time` (a chunk's: those over `chunks`) and transfers taking none.
// InternalError when the order deadlocks (a rank's next action waits for one that waits for it).
SimulatedPipeline simulate_pipeline(PipelineSchedule schedule, int64_t stages, int64_t microbatches,
                                    double forward_time = 1.0, double backward_time = 2.0, int64_t chunks = 1);

// (S - 1) / (V·M + S - 1): the bubble with equal stages (V = 1: gpipe and 1f1b).
double bubble_formula(int64_t stages, int64_t microbatches, int64_t chunks = 1);

}  // namespace volt::pipeline

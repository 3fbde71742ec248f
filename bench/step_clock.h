#pragma once
// The clock of bench/trainer_vs_lightning: wall time over the timed steps (the device synchronized
// at both ends only) and the host time of each phase of a step, from marks the loop or the
// Trainer's hooks (ClockCallback) set, with nothing synchronized in between.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "trainer/volt.h"

namespace volt::bench {

struct Window {
  int64_t steps = 0, warmup = 0;
};

inline void synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize();
}

// Where the host's time goes within a step, marked in this order (a step marks each once): the
// forward (and loss) ends, the backward ends, the optimizer step begins and ends. With the device
// far behind the host these are launch times; a phase that waits for the device shows its wait.
enum class Mark { ForwardEnd, BackwardEnd, OptimizerStart, OptimizerEnd };
// Host microseconds per step: forward, backward, between backward and the optimizer step, the
// optimizer step, after it until the step ends, and from the end of one step to the next's start.
inline const std::vector<std::string> kPhases = {"forward",   "backward",  "pre_step",
                                                 "optimizer", "post_step", "between"};

// Times the steps [warmup, warmup + steps): the device is synchronized at both ends only. Within
// the window it adds up the host time of each phase (kPhases) from the marks, synchronizing nothing.
class StepClock {
 public:
  StepClock(torch::Device device, Window window) : device_(device), window_(window), phase_seconds_(kPhases.size()) {}
  void before_step(int64_t step) {
    const auto now = std::chrono::steady_clock::now();
    if (step > window_.warmup && step < window_.warmup + window_.steps) add(5, last_, now);
    last_ = now;
    step_start_ = now;
    if (step != window_.warmup) return;
    synchronize(device_);
    start_ = last_ = step_start_ = std::chrono::steady_clock::now();
  }
  void mark(int64_t step, Mark mark) {
    const auto now = std::chrono::steady_clock::now();
    if (step >= window_.warmup && step < window_.warmup + window_.steps) add(static_cast<size_t>(mark), last_, now);
    last_ = now;
  }
  void after_step(int64_t step, const torch::Tensor& loss) {
    const auto now = std::chrono::steady_clock::now();
    if (step >= window_.warmup && step < window_.warmup + window_.steps) add(4, last_, now);
    last_ = now;
    if (step != window_.warmup + window_.steps - 1) return;
    synchronize(device_);
    seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    final_loss_ = loss.defined() ? loss.item<double>() : std::nan("");
  }
  // "us <forward>/<backward>/...": mean host microseconds per timed step and phase.
  std::string phases() const {
    std::string out;
    for (const double seconds : phase_seconds_) {
      char cell[32];
      std::snprintf(cell, sizeof cell, "%s%.1f", out.empty() ? "" : "/",
                    1e6 * seconds / static_cast<double>(window_.steps));
      out += cell;
    }
    return out;
  }
  double seconds() const {
    volt::check<volt::Error>(seconds_ > 0, "trainer_vs_lightning: the timed window did not close (fewer steps ran)");
    return seconds_;
  }
  double final_loss() const { return final_loss_; }

 private:
  void add(size_t phase, std::chrono::steady_clock::time_point from, std::chrono::steady_clock::time_point to) {
    phase_seconds_[phase] += std::chrono::duration<double>(to - from).count();
  }
  torch::Device device_;
  Window window_;
  std::chrono::steady_clock::time_point start_, step_start_, last_;
  double seconds_ = 0, final_loss_ = 0;
  std::vector<double> phase_seconds_;
};

// The clock as a Trainer callback (batch_idx is the step: one epoch, no accumulation).
class ClockCallback : public volt::Callback {
 public:
  explicit ClockCallback(StepClock& clock) : clock_(clock) {}
  void on_train_batch_start(volt::Trainer&, volt::Module&, const volt::Batch&, int64_t batch_idx) override {
    clock_.before_step(batch_idx);
  }
  void on_train_batch_end(volt::Trainer&, volt::Module&, const torch::Tensor& loss, const volt::Batch&,
                          int64_t batch_idx) override {
    clock_.after_step(batch_idx, loss);
  }
  void on_before_backward(volt::Trainer& t, volt::Module&, const torch::Tensor&) override {
    clock_.mark(t.global_step(), Mark::ForwardEnd);
  }
  void on_after_backward(volt::Trainer& t, volt::Module&) override { clock_.mark(t.global_step(), Mark::BackwardEnd); }
  void on_before_optimizer_step(volt::Trainer& t, volt::Module&, torch::optim::Optimizer&) override {
    clock_.mark(t.global_step(), Mark::OptimizerStart);
  }
  void on_before_zero_grad(volt::Trainer& t, volt::Module&, torch::optim::Optimizer&) override {
    // After the optimizer step, which counted the step: the step it belongs to is one less.
    clock_.mark(t.global_step() - 1, Mark::OptimizerEnd);
  }

 private:
  StepClock& clock_;
};

}  // namespace volt::bench

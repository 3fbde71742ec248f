#pragma once
// Note [Backward inside the step]
// A pipeline schedule interleaves forwards and backwards, so a batch's whole backward runs inside
// the strategy's run_step, before the Trainer asks for it. The Trainer then runs backward on the
// loss run_step returned, divided by its accumulation window W (the pipeline refuses a precision
// that scales losses). That loss carries the stage's gradients: its backward multiplies what the
// step added to them by the factor that reaches it (1/W), and adds back what the window's earlier
// micro-batches left, which begin_step moved aside. So after a window each gradient is
// Σ_k g_k / W, what accumulation on one process makes, and bit for bit so when W is a power of two
// (multiplying by 1/W is then exact, as dividing the loss by W is) or 1.
#include <torch/torch.h>

#include <vector>

namespace volt::pipeline {

class StageGradientWindow {
 public:
  StageGradientWindow();
  // Moves aside the gradients `parameters` hold (an open window's), so that the step's backwards
  // accumulate from none.
  void begin_step(std::vector<torch::Tensor> parameters);
  // `value` (a 0-dim loss, not part of any graph) as a tensor that requires grad and whose
  // backward finishes the step with the gradient that reaches it.
  torch::Tensor carrying_loss(const torch::Tensor& value);
  // Each gradient becomes this step's times `factor` plus what was moved aside. Once per step.
  void finish(const torch::Tensor& factor);
  // Whether a step began and has not finished (its loss's backward did not run yet).
  bool open() const { return open_; }

 private:
  std::vector<torch::Tensor> parameters_;
  std::vector<torch::Tensor> aside_;  // per parameter; undefined where it held none
  torch::Tensor anchor_;              // the input that makes carrying_loss require grad
  bool open_ = false;
};

}  // namespace volt::pipeline

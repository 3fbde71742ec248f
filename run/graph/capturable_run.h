#pragma once
// What a run must switch on for its steps to be captured (--cuda-graph), for the Trainer
// (CapturedTraining) and the Fabric (Fabric::captured_step) alike: the refusals, and the
// optimizers, precision and gradients in their capturable modes for as long as it lives.
//
// Note [A run a graph can replay]: a replay changes only tensors, so what a step changes from one
// step to the next must be a tensor the graph reads:
//   - every optimizer is a capturable volt::FusedAdamW: its learning rates are device tensors
//     refreshed from the options before each step (refresh_learning_rates; an LR scheduler
//     changes the options), its step counts live on the device (Note [A step a graph can replay]);
//   - the GradScaler decides skipped steps on the device (Note [Skipping a step on the device]);
//     whether the last step was skipped is read on the host only when asked (stepped());
//   - gradients are zeroed in place, never dropped, so that the graphs find them where they were.
#include <torch/torch.h>

#include <memory>
#include <vector>

namespace volt {

class Strategy;

class CapturableRun {
 public:
  // Throws NotSupportedError, naming the cause and what to do, for what cannot be captured, in
  // this order: a strategy other than single_device and ddp; ddp with find_unused_parameters, a
  // comm hook other than allreduce, a compressing wrapper or shard_optimizer; manual optimization
  // (`automatic_optimization` false); no optimizer, or one that is not a volt::FusedAdamW; a
  // device that is not CUDA, a build without CUDA, or a LibTorch without the fused kernel.
  static void check_supported(const Strategy& strategy, bool automatic_optimization,
                              const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers);

  // Checks, then switches to the capturable modes.
  CapturableRun(Strategy& strategy, bool automatic_optimization,
                std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers);
  // Switches back (the optimizers' host step counts brought up to date).
  ~CapturableRun();
  CapturableRun(const CapturableRun&) = delete;
  CapturableRun& operator=(const CapturableRun&) = delete;

  // Before each step: the learning rates of the options into the optimizers' device tensors.
  void refresh_learning_rates();
  // Whether the last step's optimizers stepped: false when the GradScaler skipped it (reads the
  // device's flag), true without a GradScaler.
  std::vector<bool> stepped() const;

 private:
  Strategy& strategy_;
  std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers_;
};

}  // namespace volt

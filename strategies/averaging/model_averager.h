#pragma once
// Model averaging after the optimizer step (PyTorch's torch.distributed.algorithms.model_averaging):
// an averager counts optimizer steps and, at the steps its schedule names, replaces every rank's
// parameters by their mean over a process group. Post-local-SGD is DDP's post_local_sgd comm hook
// plus one of these (DDPStrategy runs it in after_optimizer_steps, once per accumulation window,
// after every optimizer of the window stepped); SlowMo adds a slow-momentum step to one.
//
// The groups come from the run's Topology (distributed/topology.h) and must outlive the averager.
// Not thread-safe: the training thread calls it.
#include <torch/torch.h>

#include <string>
#include <vector>

#include "core/state_dict.h"

namespace volt::averaging {

class ModelAverager {
 public:
  virtual ~ModelAverager() = default;
  virtual std::string name() const = 0;

  // Called once after every optimizer step, with the parameters to average (the same tensors, in
  // the same order, on every rank): averages them if the schedule says so at step(), then counts
  // the step. A step the GradScaler skipped (inf/NaN gradients) counts too, as in PyTorch, where
  // average_parameters() follows scaler.step() whether or not it stepped. [collective over the
  // groups the schedule names at this step]
  virtual void average_parameters(const std::vector<torch::Tensor>& parameters) = 0;

  // Optimizer steps seen so far.
  int64_t step() const { return step_; }
  // Steps before the schedule may average (post-local-SGD's start_local_sgd_iter).
  int64_t warmup_steps() const { return warmup_steps_; }
  // Whether ranks may hold different models or optimizer states now: a step after the warm-up has
  // been taken, so at least one optimizer step used gradients that were not the world's mean.
  bool past_warmup() const { return step_ > warmup_steps_; }

  // Whether state_dict() differs per rank (e.g. buffers sharded across ranks): a checkpoint then
  // keeps every rank's.
  virtual bool state_differs_per_rank() const { return false; }
  // {"step"}: the same on every rank unless state_differs_per_rank(). Subclasses with more state
  // extend it.
  virtual StateDict state_dict() const;
  // Throws CheckpointError when `state` has no step.
  virtual void load_state_dict(const StateDict& state);

 protected:
  // Throws ConfigurationError for warmup_steps < 0.
  explicit ModelAverager(int64_t warmup_steps);

  int64_t step_ = 0;

 private:
  int64_t warmup_steps_ = 0;
};

}  // namespace volt::averaging

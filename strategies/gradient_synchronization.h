#pragma once
// A part of the Strategy (strategy.h): how the gradients of the ranks agree. The Trainer's loop
// brackets every backward with pre_backward / post_backward, runs accumulation micro-batches
// inside no_sync(), and clears gradients with zero_grad after a step. The defaults are one
// process's: nothing to synchronize, gradients set to none, clipping over the local gradients.
//
// Every method marked [collective] must be called by every rank at the same point.
#include <torch/torch.h>

#include "core/scope_guard.h"

namespace volt {

class PartContext;

class GradientSynchronization {
 public:
  // `context`: the strategy that holds this part and outlives it, as much of it as a part may
  // read (Note [Part context]).
  explicit GradientSynchronization(const PartContext& context) : context_(context) {}
  virtual ~GradientSynchronization() = default;

  // Micro-batches inside this scope accumulate gradients locally without synchronizing.
  virtual ScopeGuard no_sync() { return {}; }
  // Around the precision's backward of `loss` (Strategy::backward). [collective for reducers]
  virtual void pre_backward(const torch::Tensor& loss) {}
  virtual void post_backward(const torch::Tensor& loss) {}
  // An accumulation window whose earlier micro-batches ran backward under no_sync() closed with a
  // micro-batch that ran none (training_step returned no loss), so the synchronization done in
  // backward never happened: synchronize the accumulated gradients now, before the step
  // (Note [A window that closes without backward]). One process: nothing to do. [collective]
  virtual void synchronize_accumulated_gradients(torch::nn::Module& module) {}
  // Clears gradients after a step: set to undefined (frees memory, like PyTorch's
  // zero_grad(set_to_none=True)); gradients that are views into a strategy's buffers are zeroed
  // in place instead, and so is every gradient while zero_in_place(true) holds (a captured step's
  // graphs read and write gradients at fixed addresses).
  virtual void zero_grad(torch::optim::Optimizer& optimizer);
  void zero_in_place(bool on) { zero_in_place_ = on; }
  bool zeroes_in_place() const { return zero_in_place_; }
  // Clips the gradients of `optimizer`'s parameters, already at their true scale (the Strategy
  // unscales first), to a total `norm_type`-norm of `max_norm`; returns the norm before clipping,
  // a 0-dim tensor on the gradients' device, not read on the host (Note [Metrics read when
  // asked]). The norm is over every rank's shard, each parameter once, when the strategy shards
  // the optimizer (Strategy::shards_optimizer_state) or the parameters. [collective when sharded]
  virtual torch::Tensor clip_norm(torch::optim::Optimizer& optimizer, double max_norm, double norm_type);
  virtual void clip_value(torch::optim::Optimizer& optimizer, double clip_value);

 protected:
  const PartContext& context() const { return context_; }

 private:
  const PartContext& context_;
  bool zero_in_place_ = false;
};

}  // namespace volt

#pragma once
// volt::GradScaler — dynamic loss scaling with PyTorch's torch.cuda.amp.GradScaler semantics, on
// CPU and CUDA tensors. Per iteration:
//
//   scaler.scale(loss).backward();   // gradients now carry a factor `scale`
//   scaler.unscale_(optimizer);      // optional, e.g. before clipping; at most once per step
//   scaler.step(optimizer);          // unscales if needed; skips the step on inf/NaN gradients
//   scaler.update();                 // once, after every optimizer of the iteration stepped
//
// update() multiplies the scale by backoff_factor after an iteration in which any optimizer found
// inf/NaN gradients, and by growth_factor after growth_interval finite iterations in a row; so
// after k growths and j backoffs the scale is init_scale × growth_factor^k × backoff_factor^j.
//
// Across ranks (Note [Agreeing on inf]): whether a step is skipped must be the same decision on
// every rank, or the replicas diverge. unscale_ passes each optimizer's found-inf flag through the
// reducer set with set_found_inf_reducer (the Strategy installs a Max all-reduce there), which
// makes unscale_, and step/update through it, a **collective** under a multi-process strategy.
//
// Note [Skipping a step on the device]: with set_device_step installed,
// step() never reads the found-inf flag on the host. It hands the flag to the installed function,
// which steps the optimizer unless the flag is set (volt::FusedAdamW::step_unless), and returns
// true; last_found_inf() then holds the decision for whoever needs it later. update() and
// skipped_steps' count stay on the device in every mode. This is what a captured step
// (--cuda-graph) needs: a graph cannot hold a read on the host.
//
// Not thread-safe; one scaler serves one training loop.
#include <torch/torch.h>

#include <functional>
#include <map>

#include "core/state_dict.h"

namespace volt {

struct GradScalerOptions {
  double init_scale = 65536.0;    // the first loss multiplier (2^16); finite and > 0
  double growth_factor = 2.0;     // multiplies the scale after growth_interval finite steps; > 1
  double backoff_factor = 0.5;    // multiplies the scale after a step with inf/NaN gradients; in (0, 1)
  int64_t growth_interval = 2000; // consecutive finite iterations before the scale grows; >= 1
  bool enabled = true;            // false: scale() and unscale_() pass through, step() always steps
  // Throws ConfigurationError naming the first field out of range.
  void validate() const;
};

// Turns this rank's found-inf flag (a one-element float tensor, 1 = inf/NaN seen) into the flag
// every rank agrees on. A collective when it talks to other ranks.
using FoundInfReducer = std::function<torch::Tensor(const torch::Tensor&)>;
// Steps `optimizer` unless `found_inf` (one float element on the device) is nonzero, deciding on
// the device.
using DeviceStep = std::function<void(torch::optim::Optimizer& optimizer, const torch::Tensor& found_inf)>;

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // outputs × scale. The scale tensor is created on the first call, on the outputs' device.
  torch::Tensor scale(const torch::Tensor& outputs);
  std::vector<torch::Tensor> scale(const std::vector<torch::Tensor>& outputs);

  // Divides the gradients of `optimizer`'s parameters by the scale in place and records whether
  // any was inf/NaN. A second call for the same optimizer before update(), or a call after its
  // step(), throws ConfigurationError. [collective when a reducer talks to other ranks]
  void unscale_(torch::optim::Optimizer& optimizer);
  // Whether unscale_ ran for `optimizer` since the last update() (its gradients are at their true scale).
  bool unscaled(const torch::optim::Optimizer& optimizer) const;
  // Unscales (unless unscale_ already did) and calls optimizer.step() unless the gradients held
  // inf/NaN. Returns whether it stepped. A second step() before update() throws.
  bool step(torch::optim::Optimizer& optimizer);
  // Adjusts the scale from the found-inf flags of every optimizer unscaled since the last update
  // (throws when there was none) and starts the next iteration.
  void update();
  // Sets the scale to `new_scale` instead of the automatic rule (PyTorch's update(new_scale)).
  void update(double new_scale);

  // The current scale: 1.0 when disabled, init_scale before the first scale().
  double get_scale() const;
  int64_t growth_tracker() const;
  // update()s that found inf/NaN in some optimizer's gradients: iterations whose step was skipped.
  // Reads the device's count.
  int64_t skipped_steps() const;
  bool is_enabled() const { return options_.enabled; }
  const GradScalerOptions& options() const { return options_; }

  // Installs the cross-rank reduction of the found-inf flag; the identity when unset.
  void set_found_inf_reducer(FoundInfReducer reducer) { reducer_ = std::move(reducer); }
  // Installs how step() skips on the device; an empty function restores the host decision.
  void set_device_step(DeviceStep step) { device_step_ = std::move(step); }
  // The found-inf flag the last update() combined (nonzero: that iteration's steps were skipped),
  // on the device, not read; undefined before the first update().
  const torch::Tensor& last_found_inf() const { return last_found_inf_; }

  // PyTorch's keys: scale, growth_factor, backoff_factor, growth_interval, _growth_tracker; plus
  // _skipped_steps. Empty when disabled (as in PyTorch).
  StateDict state_dict() const;
  // Restores a state_dict() (also one written by PyTorch's GradScaler). A no-op when disabled;
  // throws CheckpointError for an empty or malformed state.
  void load_state_dict(const StateDict& state);

 private:
  enum class Stage { Ready, Unscaled, Stepped };
  struct OptimizerState {
    Stage stage = Stage::Ready;
    torch::Tensor found_inf;  // one element on the scale's device, after the reducer
  };
  // The scale and growth tracker, which exist once scale() has seen a device.
  void require_scale(const char* caller) const;

  GradScalerOptions options_;
  torch::Tensor scale_;           // float32, shape [1]
  torch::Tensor growth_tracker_;  // int32, shape [1]: finite iterations since the last change
  torch::Tensor skipped_steps_;   // int64, shape [1], beside the scale: counted on the device
  torch::Tensor last_found_inf_;
  int64_t init_growth_tracker_ = 0;
  int64_t init_skipped_steps_ = 0;
  std::map<const torch::optim::Optimizer*, OptimizerState> per_optimizer_;
  FoundInfReducer reducer_;
  DeviceStep device_step_;
};

}  // namespace volt

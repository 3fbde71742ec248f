#pragma once
// How numbers are represented during training. A Strategy holds one Precision and runs its
// pipeline (Lightning's shape): forward inside forward_context(), backward() (which may scale the
// loss), unscale_gradients() before clipping, optimizer_step() (which may skip a step), update().
// The base class is plain full precision ("32-true").
#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>

#include "core/scope_guard.h"
#include "core/state_dict.h"
#include "data/batch.h"
#include "precision/grad_scaler.h"

namespace volt {

class Precision {
 public:
  virtual ~Precision() = default;
  virtual std::string name() const { return "32-true"; }

  // Casts parameters and buffers (only the *-true variants other than 32 do).
  virtual void convert_module(torch::nn::Module& module) {}
  // The dtype of floating-point parameters, and so of their gradients, once convert_module ran.
  virtual torch::Dtype parameter_dtype() const { return torch::kFloat; }
  // The dtype a step's matrix products run in (autocast's for *-mixed): what a device's peak
  // FLOP/s is looked up by (ThroughputMonitor's MFU).
  virtual torch::Dtype compute_dtype() const { return parameter_dtype(); }
  // Casts the floating-point tensors of a batch to match the module.
  virtual Batch convert_input(const Batch& batch) { return batch; }
  // The region in which a step's forward runs (autocast for *-mixed).
  virtual ScopeGuard forward_context() { return {}; }

  // loss.backward(), scaled where the precision scales losses.
  virtual void backward(const torch::Tensor& loss) { loss.backward(); }
  // Whether backward() scales the loss (16-mixed's GradScaler): a strategy that runs backward
  // itself, inside its step, cannot apply the scale and refuses such a precision.
  virtual bool scales_losses() const { return false; }
  // Leaves the optimizer's gradients at their true scale (before clipping and the
  // on_before_optimizer_step hooks). Unscales once per optimizer per step: a second call before
  // the step (clip_gradients in manual optimization or the Fabric, then the step) does nothing.
  virtual void unscale_gradients(torch::optim::Optimizer& optimizer) {}
  // Takes the optimizer step unless this precision decides to skip it; returns whether it stepped.
  virtual bool optimizer_step(torch::optim::Optimizer& optimizer) {
    optimizer.step();
    return true;
  }
  // After every optimizer of a step has gone through optimizer_step (the GradScaler's update).
  virtual void update() {}

  // Numbers the Trainer logs each step (e.g. amp_scale, amp_skipped_steps); empty by default.
  virtual std::map<std::string, double> metrics() const { return {}; }
  // The precision's own state for checkpoints (a GradScaler's); empty by default.
  virtual StateDict state_dict() const { return {}; }
  virtual void load_state_dict(const StateDict& state) {}

  // Where a precision that skips steps on inf/NaN gradients makes that decision agree across
  // ranks (Note [Agreeing on inf] in grad_scaler.h). The Strategy installs its Max all-reduce
  // here; precisions that never skip a step have nothing to reduce and ignore it.
  virtual void set_found_inf_reducer(FoundInfReducer reducer) {}
  // Where a precision that skips steps decides on the device instead of reading its flag on the
  // host (Note [Skipping a step on the device] in grad_scaler.h): optimizer_step() then calls
  // `step` and returns true, and last_found_inf() holds the decision. Precisions that never skip
  // a step ignore it.
  virtual void set_device_step(DeviceStep step) {}
  // The flag of the last update() (nonzero: its steps were skipped), not read; undefined for
  // precisions that never skip a step.
  virtual torch::Tensor last_found_inf() const { return {}; }
};

// Whether `device` can multiply float16 matrices (LibTorch 1.13 has no CPU kernel for it): what
// 16-true and float16 gradient compression that multiplies (PowerSGD) need.
bool float16_matmul_available(const torch::Device& device);

// The precision that `name` (a TrainerOptions::precision value) selects for `device`:
// 32-true, 64-true, bf16-mixed, 16-mixed (autocast float16 + GradScaler), bf16-true, 16-true,
// or one a user registered (precision_registry.h, which resolves all three functions below).
// Throws ConfigurationError for an unknown name (listing the valid ones), NotSupportedError for
// one this device cannot run (16-mixed without CUDA, 16-true without float16 matrix multiply).
std::shared_ptr<Precision> make_precision(const std::string& name, const torch::Device& device);

// Every valid TrainerOptions::precision value, in canonical form, in registration order (the
// reference stays valid and includes precisions registered later).
const std::vector<std::string>& precision_names();

// `name` in canonical form: itself, or for Lightning's short aliases 32, 64, 16, bf16 the
// canonical name (32-true, 64-true, 16-mixed, bf16-mixed). Throws ConfigurationError for an
// unknown name, with the valid values and the closest one.
std::string canonical_precision_name(const std::string& name);

}  // namespace volt

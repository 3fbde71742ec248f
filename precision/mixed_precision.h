#pragma once
#include <memory>

#include "precision/grad_scaler.h"
#include "precision/precision.h"

namespace volt {

// "bf16-mixed" and "16-mixed": parameters, gradients and optimizer state stay float32; the
// forward (and the loss) runs under autocast, which computes matrix multiplies and convolutions
// in the lower-precision `dtype`. With a GradScaler (what 16-mixed uses: float16's narrow range
// lets small gradients underflow), the loss is scaled before backward, gradients are unscaled
// before clipping, and steps with inf/NaN gradients are skipped and counted. bfloat16 has
// float32's range, so bf16-mixed needs no scaler by default.
//
// Owns its scaler. Not thread-safe; the forward must run on the thread that entered the context.
class MixedPrecision : public Precision {
 public:
  // `dtype`: torch::kBFloat16 or torch::kHalf; `device`: where the forward runs; `scaler`: null
  // for none. Throws NotSupportedError for float16 on a CPU (LibTorch's CPU autocast lowers to
  // bfloat16 only) and ConfigurationError for another dtype.
  MixedPrecision(torch::Dtype dtype, torch::Device device, std::shared_ptr<GradScaler> scaler = nullptr);

  std::string name() const override;
  ScopeGuard forward_context() override;
  void backward(const torch::Tensor& loss) override;
  bool scales_losses() const override { return scaler_ && scaler_->is_enabled(); }
  void unscale_gradients(torch::optim::Optimizer& optimizer) override;
  bool optimizer_step(torch::optim::Optimizer& optimizer) override;
  void update() override;
  // amp_scale and amp_skipped_steps while an enabled scaler is present; empty otherwise.
  std::map<std::string, double> metrics() const override;
  // The scaler's state_dict (empty without a scaler); loading into a precision without a scaler
  // ignores the state (a run saved with 16-mixed may resume with bf16-mixed).
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;
  void set_found_inf_reducer(FoundInfReducer reducer) override;
  void set_device_step(DeviceStep step) override;
  torch::Tensor last_found_inf() const override;

  torch::Dtype dtype() const { return dtype_; }
  torch::Dtype compute_dtype() const override { return dtype_; }
  // Null without a scaler.
  GradScaler* scaler() const { return scaler_.get(); }

 private:
  torch::Dtype dtype_;
  torch::Device device_;
  std::shared_ptr<GradScaler> scaler_;
};

}  // namespace volt

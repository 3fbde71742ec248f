#include "precision/mixed_precision.h"

#include "core/error.h"
#include "precision/autocast.h"

namespace volt {

MixedPrecision::MixedPrecision(torch::Dtype dtype, torch::Device device, std::shared_ptr<GradScaler> scaler)
    : dtype_(dtype), device_(device), scaler_(std::move(scaler)) {
  check<ConfigurationError>(dtype == torch::kBFloat16 || dtype == torch::kHalf,
                            "MixedPrecision: expected dtype bfloat16 or float16, got ", dtype);
  check<NotSupportedError>(dtype != torch::kHalf || device.is_cuda(),
                           "--precision 16-mixed: float16 autocast needs a CUDA device, and this "
                           "process runs on ", device.str(),
                           "; use --precision bf16-mixed (bfloat16 autocast works on CPU and CUDA)");
}

std::string MixedPrecision::name() const { return dtype_ == torch::kHalf ? "16-mixed" : "bf16-mixed"; }

ScopeGuard MixedPrecision::forward_context() { return autocast_scope(device_.type(), dtype_); }

void MixedPrecision::backward(const torch::Tensor& loss) {
  if (scaler_) {
    scaler_->scale(loss).backward();
  } else {
    loss.backward();
  }
}

void MixedPrecision::unscale_gradients(torch::optim::Optimizer& optimizer) {
  // Once per step: clip_gradients (manual optimization, the Fabric) may have unscaled already.
  if (scaler_ && !scaler_->unscaled(optimizer)) scaler_->unscale_(optimizer);
}

bool MixedPrecision::optimizer_step(torch::optim::Optimizer& optimizer) {
  if (scaler_) return scaler_->step(optimizer);
  optimizer.step();
  return true;
}

void MixedPrecision::update() {
  if (scaler_) scaler_->update();
}

std::map<std::string, double> MixedPrecision::metrics() const {
  if (!scaler_ || !scaler_->is_enabled()) return {};
  return {{"amp_scale", scaler_->get_scale()},
          {"amp_skipped_steps", static_cast<double>(scaler_->skipped_steps())}};
}

StateDict MixedPrecision::state_dict() const { return scaler_ ? scaler_->state_dict() : StateDict{}; }

// Without a scaler there is nothing to restore: a run saved with 16-mixed may resume with
// bf16-mixed, which has no use for a loss scale (Lightning does the same).
void MixedPrecision::load_state_dict(const StateDict& state) {
  if (scaler_) scaler_->load_state_dict(state);
}

void MixedPrecision::set_found_inf_reducer(FoundInfReducer reducer) {
  if (scaler_) scaler_->set_found_inf_reducer(std::move(reducer));
}

void MixedPrecision::set_device_step(DeviceStep step) {
  if (scaler_) scaler_->set_device_step(std::move(step));
}

torch::Tensor MixedPrecision::last_found_inf() const { return scaler_ ? scaler_->last_found_inf() : torch::Tensor(); }

}  // namespace volt

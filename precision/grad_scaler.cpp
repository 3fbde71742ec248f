#include "precision/grad_scaler.h"

#include <cmath>

#include "core/error.h"
#include "precision/amp_unscale.h"

namespace volt {

void GradScalerOptions::validate() const {
  check<ConfigurationError>(std::isfinite(init_scale) && init_scale > 0,
                            "GradScaler: expected init_scale finite and > 0, got ", init_scale);
  check<ConfigurationError>(std::isfinite(growth_factor) && growth_factor > 1.0,
                            "GradScaler: expected growth_factor > 1.0, got ", growth_factor);
  check<ConfigurationError>(backoff_factor > 0.0 && backoff_factor < 1.0,
                            "GradScaler: expected backoff_factor in (0, 1), got ", backoff_factor);
  check<ConfigurationError>(growth_interval >= 1, "GradScaler: expected growth_interval >= 1, got ",
                            growth_interval);
}

GradScaler::GradScaler(GradScalerOptions options) : options_(options) { options_.validate(); }

void GradScaler::require_scale(const char* caller) const {
  check<ConfigurationError>(scale_.defined(), "GradScaler::", caller,
                            ": the scale does not exist yet; call scale(loss) and backward() on its "
                            "result earlier in the iteration");
}

torch::Tensor GradScaler::scale(const torch::Tensor& outputs) {
  if (!options_.enabled) return outputs;
  check<ConfigurationError>(outputs.defined(), "GradScaler::scale: expected a defined tensor, got an undefined one");
  if (!scale_.defined()) {
    const auto on = torch::TensorOptions().device(outputs.device());
    scale_ = torch::full({1}, options_.init_scale, on.dtype(torch::kFloat));
    growth_tracker_ = torch::full({1}, init_growth_tracker_, on.dtype(torch::kInt));
    skipped_steps_ = torch::full({1}, init_skipped_steps_, on.dtype(torch::kLong));
  }
  return outputs * scale_.to(outputs.device(), /*non_blocking=*/true);
}

std::vector<torch::Tensor> GradScaler::scale(const std::vector<torch::Tensor>& outputs) {
  std::vector<torch::Tensor> scaled;
  scaled.reserve(outputs.size());
  for (const auto& output : outputs) scaled.push_back(scale(output));
  return scaled;
}

void GradScaler::unscale_(torch::optim::Optimizer& optimizer) {
  if (!options_.enabled) return;
  require_scale("unscale_");
  auto& state = per_optimizer_[&optimizer];
  check<ConfigurationError>(state.stage != Stage::Unscaled,
                            "GradScaler::unscale_: already called for this optimizer since the last "
                            "update(); call it at most once per optimizer per iteration");
  check<ConfigurationError>(state.stage != Stage::Stepped,
                            "GradScaler::unscale_: called after step() for this optimizer; unscale "
                            "before step(), or call update() to start the next iteration");

  // Division in double then rounding, as PyTorch does, so that inv_scale is exact for powers of two.
  const auto inv_scale = scale_.to(torch::kDouble).reciprocal().to(torch::kFloat);
  // Gradients grouped by device: the fused CUDA kernel wants one device per call.
  std::map<std::string, std::vector<torch::Tensor>> by_device;
  for (auto& group : optimizer.param_groups()) {
    for (auto& param : group.params()) {
      auto grad = param.grad();
      if (!grad.defined()) continue;
      check<ConfigurationError>(grad.scalar_type() != torch::kHalf,
                                "GradScaler::unscale_: a parameter's gradient is float16; the scaler "
                                "expects float32 parameters (use 16-mixed, which keeps them in "
                                "float32, rather than 16-true)");
      by_device[grad.device().str()].push_back(grad.is_sparse() ? grad._values() : grad);
    }
  }
  auto found_inf = torch::zeros({1}, scale_.options().dtype(torch::kFloat));
  for (auto& [device, grads] : by_device) {
    const auto on_device = grads.front().device();
    auto local_found = torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat).device(on_device));
    non_finite_check_and_unscale_(grads, local_found, inv_scale.to(on_device));
    found_inf.add_(local_found.to(found_inf.device()));
  }
  if (reducer_) {
    found_inf = reducer_(found_inf);
    check<ConfigurationError>(found_inf.defined() && found_inf.numel() == 1,
                              "GradScaler: the found-inf reducer must return a one-element tensor, got ",
                              found_inf.defined() ? found_inf.sizes() : torch::IntArrayRef{});
  }
  state.found_inf = found_inf;
  state.stage = Stage::Unscaled;
}

bool GradScaler::unscaled(const torch::optim::Optimizer& optimizer) const {
  const auto it = per_optimizer_.find(&optimizer);
  return it != per_optimizer_.end() && it->second.stage == Stage::Unscaled;
}

bool GradScaler::step(torch::optim::Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  require_scale("step");
  auto& state = per_optimizer_[&optimizer];
  check<ConfigurationError>(state.stage != Stage::Stepped,
                            "GradScaler::step: already called for this optimizer since the last "
                            "update(); call update() once per iteration after the steps");
  if (state.stage == Stage::Ready) unscale_(optimizer);
  VOLT_INTERNAL_ASSERT(state.found_inf.defined(), "unscale_ records a found-inf flag");
  if (device_step_) {
    device_step_(optimizer, state.found_inf);
    state.stage = Stage::Stepped;
    return true;
  }
  const bool finite = state.found_inf.item<float>() == 0.0f;
  if (finite) optimizer.step();
  state.stage = Stage::Stepped;
  return finite;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  require_scale("update");
  torch::Tensor found_inf;
  for (const auto& [optimizer, state] : per_optimizer_) {
    if (!state.found_inf.defined()) continue;
    found_inf = found_inf.defined() ? found_inf + state.found_inf : state.found_inf.clone();
  }
  check<ConfigurationError>(found_inf.defined(),
                            "GradScaler::update: no optimizer was unscaled or stepped since the last "
                            "update(); call step(optimizer) before update()");
  skipped_steps_.add_(found_inf.to(skipped_steps_.device()).gt(0));
  last_found_inf_ = found_inf;
  update_scale_(scale_, growth_tracker_, found_inf.to(scale_.device()), options_.growth_factor,
                options_.backoff_factor, options_.growth_interval);
  per_optimizer_.clear();
}

void GradScaler::update(double new_scale) {
  if (!options_.enabled) return;
  require_scale("update");
  check<ConfigurationError>(std::isfinite(new_scale) && new_scale > 0,
                            "GradScaler::update: expected a new scale finite and > 0, got ", new_scale);
  scale_.fill_(new_scale);
  per_optimizer_.clear();
}

double GradScaler::get_scale() const {
  if (!options_.enabled) return 1.0;
  return scale_.defined() ? scale_.item<float>() : options_.init_scale;
}

int64_t GradScaler::skipped_steps() const {
  return skipped_steps_.defined() ? skipped_steps_.item<int64_t>() : init_skipped_steps_;
}

int64_t GradScaler::growth_tracker() const {
  return growth_tracker_.defined() ? growth_tracker_.item<int32_t>() : init_growth_tracker_;
}

StateDict GradScaler::state_dict() const {
  StateDict state;
  if (!options_.enabled) return state;
  state.set("scale", get_scale());
  state.set("growth_factor", options_.growth_factor);
  state.set("backoff_factor", options_.backoff_factor);
  state.set("growth_interval", options_.growth_interval);
  state.set("_growth_tracker", growth_tracker());
  state.set("_skipped_steps", skipped_steps());
  return state;
}

namespace {

double number_at(const StateDict& state, const std::string& key) {
  const auto value = state.at(key);
  check<CheckpointError>(value.isDouble() || value.isInt(), "GradScaler::load_state_dict: expected '", key,
                         "' to be a number, got ", value.tagKind());
  return value.isDouble() ? value.toDouble() : static_cast<double>(value.toInt());
}

int64_t integer_at(const StateDict& state, const std::string& key) {
  const auto value = state.at(key);
  check<CheckpointError>(value.isInt(), "GradScaler::load_state_dict: expected '", key,
                         "' to be an integer, got ", value.tagKind());
  return value.toInt();
}

}  // namespace

void GradScaler::load_state_dict(const StateDict& state) {
  if (!options_.enabled) return;
  check<CheckpointError>(!state.empty(),
                         "GradScaler::load_state_dict: the state is empty, as a disabled GradScaler "
                         "writes it; load it into a disabled scaler or use a state from an enabled one");
  GradScalerOptions loaded = options_;
  loaded.init_scale = number_at(state, "scale");
  loaded.growth_factor = number_at(state, "growth_factor");
  loaded.backoff_factor = number_at(state, "backoff_factor");
  loaded.growth_interval = integer_at(state, "growth_interval");
  const int64_t tracker = integer_at(state, "_growth_tracker");
  const int64_t skipped = state.contains("_skipped_steps") ? integer_at(state, "_skipped_steps") : 0;
  try {
    loaded.validate();
  } catch (const ConfigurationError& error) {
    throw CheckpointError(std::string("GradScaler::load_state_dict: the state holds invalid values: ") +
                          error.what());
  }
  check<CheckpointError>(tracker >= 0 && tracker < loaded.growth_interval,
                         "GradScaler::load_state_dict: expected _growth_tracker in [0, growth_interval=",
                         loaded.growth_interval, "), got ", tracker);
  options_ = loaded;
  init_growth_tracker_ = tracker;
  init_skipped_steps_ = skipped;
  if (scale_.defined()) {
    scale_.fill_(loaded.init_scale);
    growth_tracker_.fill_(tracker);
    skipped_steps_.fill_(skipped);
  }
}

}  // namespace volt

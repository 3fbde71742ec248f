#include "precision/true_precision.h"

#include "core/error.h"
#include "precision/autocast.h"

namespace volt {
namespace {

torch::Tensor cast_floating(const torch::Tensor& tensor, torch::Dtype dtype) {
  return tensor.defined() && tensor.is_floating_point() ? tensor.to(dtype) : tensor;
}

}  // namespace

TruePrecision::TruePrecision(torch::Dtype dtype) : dtype_(dtype) {
  check<ConfigurationError>(dtype == torch::kDouble || dtype == torch::kBFloat16 || dtype == torch::kHalf,
                            "TruePrecision: expected dtype float64, bfloat16 or float16, got ", dtype);
}

std::string TruePrecision::name() const {
  if (dtype_ == torch::kDouble) return "64-true";
  return dtype_ == torch::kHalf ? "16-true" : "bf16-true";
}

// torch::nn::Module::to(dtype) would cast integer buffers too; Python's casts floating ones only.
void TruePrecision::convert_module(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (auto& parameter : module.parameters()) {
    if (parameter.is_floating_point()) parameter.set_data(parameter.to(dtype_));
  }
  for (auto& buffer : module.buffers()) {
    if (buffer.is_floating_point()) buffer.set_data(buffer.to(dtype_));
  }
}

Batch TruePrecision::convert_input(const Batch& batch) {
  Batch converted;
  converted.input = cast_floating(batch.input, dtype_);
  converted.target = cast_floating(batch.target, dtype_);
  for (const auto& [name, tensor] : batch.extras) converted.extras[name] = cast_floating(tensor, dtype_);
  return converted;
}

ScopeGuard TruePrecision::forward_context() {
  return dtype_ == torch::kDouble ? default_dtype_scope(dtype_) : ScopeGuard{};
}

}  // namespace volt

#pragma once
#include "precision/precision.h"

namespace volt {

// "64-true", "bf16-true" and "16-true": the module's floating-point parameters and buffers, and
// the floating-point tensors of every batch, are cast to `dtype`; everything (forward, gradients,
// optimizer state) then lives in that dtype. Integer buffers (e.g. BatchNorm's
// num_batches_tracked) keep their type. 64-true also makes float64 the default dtype during the
// forward, so tensors a step creates match the module (Lightning's rule); the 16-bit variants
// leave the default alone (LibTorch 1.13 does not support a 16-bit default dtype).
class TruePrecision : public Precision {
 public:
  // `dtype`: torch::kDouble, torch::kBFloat16 or torch::kHalf; anything else is a
  // ConfigurationError.
  explicit TruePrecision(torch::Dtype dtype);

  std::string name() const override;
  void convert_module(torch::nn::Module& module) override;
  torch::Dtype parameter_dtype() const override { return dtype_; }
  Batch convert_input(const Batch& batch) override;
  ScopeGuard forward_context() override;

  torch::Dtype dtype() const { return dtype_; }

 private:
  torch::Dtype dtype_;
};

}  // namespace volt

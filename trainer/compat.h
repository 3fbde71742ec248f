#pragma once
// Every difference between LibTorch 1.13 (Debian, CPU) and 2.x (CUDA builds) that volt meets
// lives here, so the rest of the code reads the same for both.
#include <ATen/Context.h>
#include <ATen/core/Tensor.h>
#include <c10/util/C++17.h>
#include <torch/version.h>

#include <string>

namespace volt::compat {

#if defined(VOLT_WITH_CUDA)
inline constexpr bool kBuiltWithCuda = true;
#else
inline constexpr bool kBuiltWithCuda = false;
#endif

inline constexpr bool kTorch2 = TORCH_VERSION_MAJOR >= 2;

// Both versions take (enabled, warn_only); kept here because the signature moved before.
inline void set_deterministic_algorithms(bool enabled) {
  at::globalContext().setDeterministicAlgorithms(enabled, /*warn_only=*/false);
}

// The key under which torch::optim::Optimizer::state() keeps a parameter's state: the address of
// its TensorImpl, printed into a string in 1.13 and as a plain pointer in 2.x.
#if TORCH_VERSION_MAJOR >= 2
using OptimizerStateKey = void*;
inline OptimizerStateKey optimizer_state_key(const at::Tensor& parameter) {
  return parameter.unsafeGetTensorImpl();
}
#else
using OptimizerStateKey = std::string;
inline OptimizerStateKey optimizer_state_key(const at::Tensor& parameter) {
  return c10::guts::to_string(parameter.unsafeGetTensorImpl());
}
#endif

}  // namespace volt::compat

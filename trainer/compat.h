#pragma once
// Every difference between LibTorch 1.13 (Debian, CPU) and 2.x (CUDA builds) that volt meets
// lives here, so the rest of the code reads the same for both.
#include <ATen/Context.h>
#include <torch/version.h>

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

}  // namespace volt::compat

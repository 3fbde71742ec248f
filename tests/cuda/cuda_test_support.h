#pragma once
// What the CUDA tests share. They compile in every build (Debian's CPU-only LibTorch 1.13 and a
// CUDA LibTorch 2.x) and run where a CUDA device is visible (tools/gpu_check.sh runs them on the
// GPU machine: `ctest -L cuda`); elsewhere each one is skipped, saying which device is missing
// and why, so that a run without a GPU never reads as "passed".
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "core/compat.h"

namespace volt::testing {

// Why this process cannot run a CUDA test ("" when it can).
inline std::string missing_cuda_device() {
  if (!compat::kBuiltWithCuda) {
    return "needs a CUDA device, and this LibTorch (" TORCH_VERSION ") is CPU-only: build against a CUDA "
           "LibTorch (tools/setup_pytorch2.sh) and run on a machine with a GPU (tools/gpu_check.sh)";
  }
  if (!torch::cuda::is_available()) {
    return "needs a CUDA device (cuda:0), and LibTorch " TORCH_VERSION " sees none on this machine; "
           "tools/gpu_check.sh runs these tests on the GPU machine";
  }
  return "";
}

}  // namespace volt::testing

// Skips the calling test, naming the missing device, where no CUDA device is visible.
#define VOLT_REQUIRE_CUDA()                                                    \
  do {                                                                         \
    if (const auto volt_missing = ::volt::testing::missing_cuda_device();      \
        !volt_missing.empty()) {                                               \
      GTEST_SKIP() << volt_missing;                                            \
    }                                                                          \
  } while (false)

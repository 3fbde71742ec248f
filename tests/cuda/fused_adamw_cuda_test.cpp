// volt::FusedAdamW on a CUDA device (Note [Fused AdamW]): one _fused_adamw_ kernel call per
// (device, dtype, step count) group instead of AdamW's per-parameter kernels, and the same
// training as torch::optim::AdamW on the GPU and as FusedAdamW on the CPU. Skipped without a
// CUDA device (cuda_test_support.h).
#include <gtest/gtest.h>

#include "tests/cuda/cuda_test_support.h"
#include "tests/support/fused_adamw_problem.h"
#include "tests/support/operator_counter.h"
#include "run/optim/fused_adamw.h"

namespace volt::testing {
namespace {

TEST(CudaFusedAdamW, OneKernelPerGroupAndTheSameTrainingAsAdamW) {
  VOLT_REQUIRE_CUDA();
  ASSERT_TRUE(FusedAdamW::fused_available()) << "a CUDA LibTorch of 2.4 or later has the kernel";
  const torch::Device cuda(torch::kCUDA, 0);
  for (const bool amsgrad : {false, true}) {
    auto fused = make_adamw_problem(make_fused, cuda, amsgrad);
    auto on_cpu = make_adamw_problem(make_fused, torch::kCPU, amsgrad);
    auto reference = make_adamw_problem(make_adamw, cuda, amsgrad);
    for (int64_t step = 0; step < 12; ++step) {
      {
        OperatorCounter counter;
        adamw_problem_step(fused, step);
        torch::cuda::synchronize();
        // Group 0 is one call; group 1's late joiner is one call from step 4 on.
        EXPECT_EQ(counter.count("aten::_fused_adamw_"), step >= 4 ? 2 : 1) << "step " << step;
        EXPECT_EQ(counter.count("aten::addcdiv_"), 0) << "no per-parameter AdamW arithmetic, step " << step;
      }
      adamw_problem_step(on_cpu, step);
      adamw_problem_step(reference, step);
      for (size_t i = 0; i < fused.params.size(); ++i) {
        const auto gpu = fused.params[i].cpu();
        const std::string what =
            "amsgrad " + std::to_string(amsgrad) + ", step " + std::to_string(step) + ", parameter " + std::to_string(i);
        EXPECT_TRUE(torch::allclose(gpu, reference.params[i].cpu(), 1e-5, 1e-6)) << what << " vs AdamW on the GPU";
        EXPECT_TRUE(torch::allclose(gpu, on_cpu.params[i], 1e-5, 1e-6)) << what << " vs FusedAdamW on the CPU";
      }
    }
  }
}

}  // namespace
}  // namespace volt::testing

// Loss scaling's two kernels on CUDA tensors: the fused ones PyTorch uses
// (_amp_foreach_non_finite_check_and_unscale_, _amp_update_scale_) are the ones that run, seen
// through the dispatcher's RecordFunction observer, and they give what volt's CPU fallback gives,
// bit for bit. Skipped without a CUDA device (cuda_test_support.h).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "precision/amp_unscale.h"
#include "tests/cuda/cuda_test_support.h"
#include "tests/support/operator_counter.h"

namespace volt::testing {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(CudaAmpKernels, UnscaleRunsTheFusedKernelAndEqualsTheCpuFallback) {
  VOLT_REQUIRE_CUDA();
  const torch::Device cuda(torch::kCUDA, 0);
  torch::manual_seed(0);
  // Gradients of several shapes (one 0-dim, one empty); the third case poisons one element.
  for (const double poison : {0.0, kInf, -kInf, std::nan("")}) {
    std::vector<torch::Tensor> cpu{torch::randn({64, 33}) * 1000, torch::tensor(3.5f), torch::empty({0}),
                                   torch::randn({7})};
    if (poison != 0.0) cpu[3][2] = poison;
    std::vector<torch::Tensor> gpu;
    for (const auto& g : cpu) gpu.push_back(g.to(cuda));
    const auto inv_scale = torch::full({1}, 1.0f / 65536.0f);
    auto found_cpu = torch::zeros({1});
    auto found_gpu = torch::zeros({1}, cuda);
    {
      OperatorCounter counter;
      non_finite_check_and_unscale_(gpu, found_gpu, inv_scale.to(cuda));
      torch::cuda::synchronize();
      EXPECT_EQ(counter.count("aten::_amp_foreach_non_finite_check_and_unscale_"), 1)
          << "the CUDA gradients must go through PyTorch's fused kernel";
    }
    non_finite_check_and_unscale_(cpu, found_cpu, inv_scale);
    EXPECT_EQ(found_gpu.item<float>(), found_cpu.item<float>()) << "poison " << poison;
    EXPECT_EQ(found_gpu.item<float>(), poison == 0.0 ? 0.0f : 1.0f) << "poison " << poison;
    for (size_t i = 0; i < cpu.size(); ++i) {
      const auto back = gpu[i].cpu();
      EXPECT_EQ(back.sizes(), cpu[i].sizes()) << "gradient " << i;
      // The same float32 multiplication on both sides: equal bits, NaN where NaN.
      EXPECT_TRUE(torch::equal(torch::isnan(back), torch::isnan(cpu[i])) &&
                  torch::equal(torch::nan_to_num(back), torch::nan_to_num(cpu[i])))
          << "gradient " << i << " with poison " << poison;
    }
  }
}

TEST(CudaAmpKernels, UpdateScaleRunsTheFusedKernelAndFollowsTheCpuRule) {
  VOLT_REQUIRE_CUDA();
  const torch::Device cuda(torch::kCUDA, 0);
  auto scale_cpu = torch::full({1}, 65536.0f), tracker_cpu = torch::zeros({1}, torch::kInt);
  auto scale_gpu = scale_cpu.to(cuda), tracker_gpu = tracker_cpu.to(cuda);
  // Finite, finite (grows at interval 2), inf (backs off), three finite, inf, inf.
  const std::vector<float> found{0, 0, 1, 0, 0, 0, 1, 1};
  OperatorCounter counter;
  for (size_t i = 0; i < found.size(); ++i) {
    const auto flag = torch::full({1}, found[i]);
    update_scale_(scale_gpu, tracker_gpu, flag.to(cuda), 2.0, 0.5, 2);
    update_scale_(scale_cpu, tracker_cpu, flag, 2.0, 0.5, 2);
    EXPECT_EQ(scale_gpu.item<float>(), scale_cpu.item<float>()) << "iteration " << i;
    EXPECT_EQ(tracker_gpu.item<int32_t>(), tracker_cpu.item<int32_t>()) << "iteration " << i;
  }
  EXPECT_EQ(counter.count("aten::_amp_update_scale_"), static_cast<int64_t>(found.size()));
  EXPECT_EQ(scale_cpu.item<float>(), 65536.0f * 2 / 2 * 2 / 2 / 2) << "the rule itself";
}

}  // namespace
}  // namespace volt::testing

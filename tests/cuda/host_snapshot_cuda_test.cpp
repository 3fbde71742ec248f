// HostSnapshot from cuda:0 (Note [Snapshots of device memory]): the copies go into pinned host
// memory on a copy stream, the compute stream's later kernels wait for them, so a tensor changed
// right after the call still snapshots the value it had at the call; the pinned buffers are kept
// for the next snapshot.
#include <gtest/gtest.h>

#include "strategies/host_snapshot.h"
#include "tests/cuda/cuda_test_support.h"

namespace volt::testing {
namespace {

TEST(CudaHostSnapshot, CopiesIntoPinnedMemoryBeforeLaterKernelsChangeTheSource) {
  VOLT_REQUIRE_CUDA();
  // 256 MiB: a copy long enough (milliseconds) for the kernels issued after the call to overtake
  // it, were they not made to wait.
  auto weights = torch::full({64, 1024, 1024}, 1.0f, torch::kCUDA);
  auto moments = torch::full({1024}, 2.0, torch::dtype(torch::kDouble).device(torch::kCUDA));
  HostSnapshot snapshot;
  const auto taken = snapshot.take(c10::IValue(std::vector<torch::Tensor>{weights, moments})).toTensorVector();
  for (int i = 0; i < 20; ++i) weights.add_(1.0f);  // the next step's optimizer, on the compute stream
  moments.zero_();
  snapshot.wait_until_copied();
  ASSERT_TRUE(taken.at(0).is_cpu());
  EXPECT_TRUE(taken.at(0).is_pinned());
  EXPECT_EQ(taken.at(0).min().item<float>(), 1.0f);
  EXPECT_EQ(taken.at(0).max().item<float>(), 1.0f);
  EXPECT_EQ(taken.at(1).min().item<double>(), 2.0);
  EXPECT_EQ(snapshot.pinned_bytes(), weights.numel() * 4 + moments.numel() * 8);
  EXPECT_EQ(weights.min().item<float>(), 21.0f);
  // The next snapshot refills the same pinned memory with the new values.
  const void* kept = taken.at(0).data_ptr();
  const auto again = snapshot.take(c10::IValue(std::vector<torch::Tensor>{weights, moments})).toTensorVector();
  snapshot.wait_until_copied();
  EXPECT_EQ(again.at(0).data_ptr(), kept);
  EXPECT_EQ(again.at(0).min().item<float>(), 21.0f);
  EXPECT_EQ(again.at(1).max().item<double>(), 0.0);
}

}  // namespace
}  // namespace volt::testing

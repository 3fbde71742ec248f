// volt's Communicator on the NCCL backend (world size 1: the GPU machine has one GPU, and NCCL
// refuses two ranks on one device): every collective volt calls runs on cuda:0 and leaves what
// the Gloo backend leaves on the CPU for the same input, the Mean division included; the
// uneven-chunk collectives take the padded path; the blocking collectives stage CPU tensors
// through the device (Note [CPU tensors on a device's backend]); the asynchronous ones refuse
// tensors elsewhere than the rank's device with a message saying where to move them. Skipped
// without a CUDA device.
#include <gtest/gtest.h>

#include "core/error.h"
#include "distributed/communicator.h"
#include "tests/cuda/cuda_test_support.h"
#include "tests/distributed/thread_ranks.h"
#include "tests/support/test_support.h"

namespace volt::testing {
namespace {

// Runs `body` on a one-rank communicator of `backend` whose rank computes on `device`.
void with_one_rank(const std::string& backend, const torch::Device& device,
                   const std::function<void(Communicator&)>& body) {
  with_communicators(
      1,
      [&](CommunicatorOptions& options) {
        options.backend = backend;
        options.device = device;
      },
      body);
}

// Every collective volt's strategies use, on a fresh tensor per call; the results in call order.
std::vector<torch::Tensor> run_collectives(Communicator& c, const torch::Device& device) {
  const auto options = torch::TensorOptions(torch::kFloat).device(device);
  std::vector<torch::Tensor> out;
  auto t = torch::arange(10, options) * 0.5;
  c.all_reduce(t, ReduceOp::Sum);
  out.push_back(t.clone());
  auto m = torch::arange(10, options) * 0.25 + 1;
  c.all_reduce(m, ReduceOp::Mean);
  out.push_back(m.clone());
  auto b = torch::full({3, 2}, 7.0, options);
  c.broadcast(b, 0);
  out.push_back(b.clone());
  out.push_back(c.all_gather(torch::arange(6, options).reshape({2, 3})));
  out.push_back(c.reduce_scatter(torch::arange(8, options), ReduceOp::Mean));
  auto gathered = torch::full({4}, -1.0, options);
  c.all_gather_into(gathered, torch::arange(4, options));
  out.push_back(gathered);
  auto scattered = torch::zeros({5}, options);
  c.reduce_scatter_into(scattered, torch::arange(5, options) * 3, ReduceOp::Sum);
  out.push_back(scattered);
  auto chunks = torch::arange(7, options);
  c.all_gather_chunks(chunks, {7});
  out.push_back(chunks.clone());
  auto own = torch::zeros({7}, options);
  c.reduce_scatter_chunks(own, torch::arange(7, options) + 2, {7}, ReduceOp::Mean);
  out.push_back(own);
  auto half = torch::arange(6, options).to(torch::kHalf);
  c.all_reduce(half, ReduceOp::Sum);
  out.push_back(half.to(torch::kFloat));
  c.barrier();
  return out;
}

TEST(NcclCommunicator, EveryCollectiveOnCudaEqualsGlooOnTheCpu) {
  VOLT_REQUIRE_CUDA();
  const torch::Device cuda(torch::kCUDA, 0);
  std::vector<torch::Tensor> nccl, gloo;
  with_one_rank("nccl", cuda, [&](Communicator& c) {
    EXPECT_EQ(c.backend_name(), "nccl");
    nccl = run_collectives(c, cuda);
  });
  with_one_rank("gloo", torch::kCPU, [&](Communicator& c) { gloo = run_collectives(c, torch::kCPU); });
  ASSERT_EQ(nccl.size(), gloo.size());
  for (size_t i = 0; i < nccl.size(); ++i) {
    EXPECT_EQ(nccl[i].device(), cuda) << "collective " << i;
    EXPECT_TRUE(torch::equal(nccl[i].cpu(), gloo[i])) << "collective " << i << ": " << nccl[i] << " vs " << gloo[i];
  }
}

TEST(NcclCommunicator, BlockingCollectivesStageCpuTensorsThroughTheDevice) {
  VOLT_REQUIRE_CUDA();
  std::vector<torch::Tensor> staged, gloo;
  with_one_rank("nccl", torch::Device(torch::kCUDA, 0), [&](Communicator& c) {
    EXPECT_EQ(c.tensor_device(), torch::Device(torch::kCUDA, 0));
    staged = run_collectives(c, torch::kCPU);
  });
  with_one_rank("gloo", torch::kCPU, [&](Communicator& c) { gloo = run_collectives(c, torch::kCPU); });
  ASSERT_EQ(staged.size(), gloo.size());
  for (size_t i = 0; i < staged.size(); ++i) {
    EXPECT_TRUE(staged[i].is_cpu()) << "collective " << i << " returned on " << staged[i].device();
    EXPECT_TRUE(torch::equal(staged[i].cpu(), gloo[i])) << "collective " << i << ": " << staged[i] << " vs " << gloo[i];
  }
}

TEST(NcclCommunicator, AutoPicksNcclForACudaDeviceAndAsyncRefusesTensorsElsewhere) {
  VOLT_REQUIRE_CUDA();
  with_one_rank("auto", torch::Device(torch::kCUDA, 0), [](Communicator& c) {
    EXPECT_EQ(c.backend_name(), "nccl");
    auto cpu = torch::ones({3});
    const auto message = error_message_of<ConfigurationError>([&] { c.all_reduce_async(cpu).wait(); });
    EXPECT_NE(message.find("expects a tensor on this rank's device cuda:0"), std::string::npos) << message;
    EXPECT_NE(message.find("move it there first"), std::string::npos) << message;
  });
}

// Without a device, or without CUDA in LibTorch, asking for NCCL is an error that says what is
// missing, never a hang; this part runs on every machine.
TEST(NcclCommunicator, NcclWithoutADeviceOrWithoutCudaIsRefusedClearly) {
  if (compat::kBuiltWithCuda && torch::cuda::is_available()) GTEST_SKIP() << "this machine has a CUDA device";
  const auto messages = run_thread_ranks(1, [](int64_t rank, int64_t port) {
    auto options = loopback_options(rank, 1, port);
    options.backend = "nccl";
    options.device = torch::Device(torch::kCUDA, 0);
    Communicator::connect(options);
  });
  ASSERT_EQ(messages.size(), 1u);
  ASSERT_FALSE(messages[0].empty()) << "a NCCL communicator without a CUDA device was created";
  if (!compat::kBuiltWithCuda) {
    EXPECT_NE(messages[0].find("backend nccl needs a LibTorch built with CUDA"), std::string::npos) << messages[0];
  } else {
    EXPECT_NE(messages[0].find("no CUDA device"), std::string::npos) << messages[0];
  }
}

}  // namespace
}  // namespace volt::testing

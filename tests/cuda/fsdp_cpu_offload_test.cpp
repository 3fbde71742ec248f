// FSDP's cpu_offload on cuda:0 (Note [CPU offload] in strategies/fsdp/flat_parameter.h), through
// the Trainer by name (the distributed_worker program, NCCL, world size 1: the GPU machine has one
// GPU): the weights after every step equal the run without the offload, a resume is bitwise the
// uninterrupted run, and the device no longer holds the shards and the optimizer state. Skipped without a CUDA device; on the
// CPU the option is refused (tests/fsdp/fsdp_strategy_test.cpp).
#include <gtest/gtest.h>

#include "tests/cuda/cuda_test_support.h"
#include "tests/distributed/worker_runs.h"
#include "tests/support/test_support.h"

namespace volt::testing {
namespace {

// The host's optimizer step and the device's run the same float32 arithmetic; what can differ is
// the kernels' rounding (the CPU's and CUDA's Adam are different code), one ulp a step at most.
TEST(FsdpCpuOffload, TrainsLikeTheRunWithoutItAfterEveryStep) {
  VOLT_REQUIRE_CUDA();
  for (const std::string optimizer : {"momentum", "adam"}) {
    for (const std::string options : {"min_num_params=10", "min_num_params=10,sharding_strategy=SHARD_GRAD_OP",
                                      "min_num_params=10,forward_prefetch=true,backward_prefetch=true",
                                      "min_num_params=10,layout=per_parameter"}) {
      const std::string plain = "fsdp:" + options;
      const std::string offloaded = plain + ",cpu_offload=true";
      const auto want = step_lines(run_print_steps(plain, 1, optimizer, "--model mlp --accelerator cuda"));
      const auto got = step_lines(run_print_steps(offloaded, 1, optimizer, "--model mlp --accelerator cuda"));
      ASSERT_FALSE(want.empty()) << plain << ": no steps printed";
      expect_steps_close(got, want, 1e-6, offloaded + " vs " + plain + " (" + optimizer + ") on cuda:0");
    }
  }
}

// A resume from an offloaded run's checkpoint (the shards and Adam state come back into host
// memory) ends bitwise like the uninterrupted run, in both checkpoint layouts.
TEST(FsdpCpuOffload, AResumeIsBitwiseTheUninterruptedRunInBothLayouts) {
  VOLT_REQUIRE_CUDA();
  for (const std::string layout : {"full", "sharded"}) {
    TemporaryDirectory first, whole;
    const std::string flags = "--strategy \"fsdp:min_num_params=10,cpu_offload=true,state_dict_type=" + layout +
                              "\" --model mlp --devices 1 --optimizer adam --batch-size 4 --accelerator cuda "
                              "--checkpoint-every-epoch";
    trained(first.path(), flags, 1);
    const auto checkpoint = newest_checkpoint(first.path());
    ASSERT_FALSE(checkpoint.empty()) << layout;
    const auto resumed = trained(first.path(), flags + " --ckpt-path " + checkpoint.string(), 2);
    const auto uninterrupted = trained(whole.path(), flags, 2);
    ASSERT_EQ(resumed.size(), 1u) << layout;
    ASSERT_EQ(uninterrupted.size(), 1u) << layout;
    EXPECT_EQ(resumed[0].params, uninterrupted[0].params) << layout << " layout";
  }
}

// The most allocated on cuda:0 over a run, read from the caching allocator (fsdp/peak_device_bytes),
// and the shards' bytes (fsdp/shard_bytes), from the last logged step of `strategy` on the wide MLP
// with Adam.
struct DeviceMemory {
  double peak = 0;
  double shard_bytes = 0;
};

DeviceMemory device_memory(const std::string& strategy) {
  TemporaryDirectory dir;
  const auto result = run_command(train_command(dir.path(), "--strategy \"" + strategy +
                                                                "\" --devices 1 --model wide_mlp --optimizer adam "
                                                                "--batch-size 4 --accelerator cuda"),
                                  240);
  EXPECT_EQ(result.exit_code, 0) << strategy << ":\n" << result.output;
  DeviceMemory memory;
  for (const auto& row : read_csv(dir.path() + "/volt_logs/version_0/metrics.csv")) {
    if (!row.count("fsdp/peak_device_bytes") || row.at("fsdp/peak_device_bytes").empty()) continue;
    memory.peak = std::stod(row.at("fsdp/peak_device_bytes"));
    memory.shard_bytes = std::stod(row.at("fsdp/shard_bytes"));
  }
  return memory;
}

// Without the offload the device holds, for the whole run, the shards and Adam's two moments:
// three times fsdp/shard_bytes (the same float32 elements each, counted from the shards); the
// shards' gradients too, except where zero_grad drops them (LibTorch 2.x's default), so they are
// not counted. With the offload those live in host memory, so the peak must drop by at least 80%
// of them; what stays on the device is what both runs have alike: the gathered units, their
// gradients until reduced, the reduce buffer and the activations.
TEST(FsdpCpuOffload, TheDeviceNoLongerHoldsTheShardsAndTheOptimizerState) {
  VOLT_REQUIRE_CUDA();
  const auto plain = device_memory("fsdp:min_num_params=1000,bucket_cap_mb=0");
  const auto offloaded = device_memory("fsdp:min_num_params=1000,bucket_cap_mb=0,cpu_offload=true");
  ASSERT_GT(plain.shard_bytes, 1 << 20) << "the wide MLP's shards: a MiB and more";
  EXPECT_EQ(offloaded.shard_bytes, plain.shard_bytes) << "the same shards, elsewhere";
  const double resident = 3 * plain.shard_bytes;
  std::printf("cpu_offload: peak on cuda:0 %.0f bytes vs %.0f without (shards and Adam state: %.0f)\n",
              offloaded.peak, plain.peak, resident);
  EXPECT_LE(offloaded.peak, plain.peak - 0.8 * resident)
      << "peak device bytes with cpu_offload " << offloaded.peak << ", without " << plain.peak;
}

}  // namespace
}  // namespace volt::testing

// Every strategy, selected by name through the Trainer, on cuda:0 over NCCL (world size 1: the GPU
// machine has one GPU) against the same run on the CPU over Gloo: the same model (an MLP with
// auto-wrappable blocks), data, initial weights and Adam; every parameter after every step within
// 1e-5 relative, naming the strategy, rank, step and parameter on a failure. Runs the
// distributed_worker program (tests/distributed). Skipped without a CUDA device.
#include <gtest/gtest.h>

#include "tests/cuda/cuda_test_support.h"
#include "tests/distributed/worker_runs.h"

namespace volt::testing {
namespace {

class NcclStrategies : public ::testing::TestWithParam<std::string> {};

TEST_P(NcclStrategies, EqualTheCpuRunAfterEveryStep) {
  VOLT_REQUIRE_CUDA();
  const std::string& strategy = GetParam();
  const auto cpu = step_lines(run_print_steps(strategy, 1, "adam", "--model mlp --accelerator cpu"));
  const auto gpu_output = run_print_steps(strategy, 1, "adam", "--model mlp --accelerator cuda");
  const auto gpu = step_lines(gpu_output);
  ASSERT_FALSE(cpu.empty()) << strategy << ": the CPU run printed no steps";
  expect_steps_close(gpu, cpu, 1e-5, strategy + " on cuda:0 (NCCL) vs the CPU (Gloo)");
}

// NCCL cannot put two ranks on one GPU. With one GPU visible, two processes asking for CUDA are
// refused on every rank before the rendezvous (run/device_choice.cpp), saying what to do,
// rather than hanging in NCCL's initialization.
TEST(NcclOneGpu, TwoRanksOnOneGpuAreRefusedSayingWhatToDo) {
  VOLT_REQUIRE_CUDA();
  if (torch::cuda::device_count() != 1) GTEST_SKIP() << "needs exactly one visible CUDA device";
  TemporaryDirectory dir;
  const auto result = run_command(train_command(dir.path(), "--strategy ddp --devices 2 --accelerator cuda"), 120);
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("2 processes per node need a CUDA device each"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("Start at most 1 processes per node (--devices 1)"), std::string::npos)
      << result.output;
}

INSTANTIATE_TEST_SUITE_P(
    ByName, NcclStrategies,
    ::testing::Values("ddp", "ddp:static_graph=true", "ddp:gradient_as_bucket_view=true",
                      "ddp:find_unused_parameters=true", "ddp:comm_hook=fp16_compress",
                      "ddp:comm_hook=bf16_compress", "ddp:comm_hook=allreduce,comm_wrapper=fp16",
                      "ddp:comm_hook=powersgd,matrix_approximation_rank=1,start_powersgd_iter=2",
                      "ddp:comm_hook=batched_powersgd,matrix_approximation_rank=1,start_powersgd_iter=2",
                      "ddp:comm_hook=post_local_sgd,start_local_sgd_iter=2,model_averaging_period=2",
                      "ddp:shard_optimizer=true", "ddp_sharded", "fsdp:min_num_params=10",
                      "fsdp:min_num_params=10,sharding_strategy=SHARD_GRAD_OP",
                      "fsdp:min_num_params=10,sharding_strategy=NO_SHARD", "slowmo:localsgd_frequency=2"),
    [](const ::testing::TestParamInfo<std::string>& info) {
      std::string name = info.param;
      for (char& c : name) {
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      }
      return name;
    });

}  // namespace
}  // namespace volt::testing

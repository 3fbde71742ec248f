// Two processes sharing one GPU (--process-group-backend gloo, Note [Device tensors on Gloo]):
// every strategy family whose collectives carry device tensors (gradient buckets, flat shards,
// activations between stages, tensor-parallel partial sums) trains on cuda:0 like the same two
// ranks on the CPU, after every step, on every rank. NCCL cannot run this: it refuses two ranks
// on one device, which is what a machine with one GPU has.
#include <gtest/gtest.h>

#include "tests/cuda/cuda_test_support.h"
#include "tests/distributed/worker_runs.h"

namespace volt::testing {
namespace {

// The MLP (--model mlp: the pipeline's stages and the plan's linears need its two body layers),
// Adam, 2 epochs of batch 4 on each of 2 ranks.
std::string two_ranks(const std::string& strategy, const std::string& accelerator) {
  return "--model mlp --accelerator " + accelerator + " --process-group-backend gloo " +
         (strategy.rfind("pipeline", 0) == 0 ? "--limit-val-batches 0" : "");
}

TEST(GlooOnOneGpu, TwoProcessesOnCudaZeroTrainLikeTwoOnTheCpu) {
  VOLT_REQUIRE_CUDA();
  for (const std::string strategy :
       {"ddp", "ddp:gradient_as_bucket_view=true", "fsdp", "ddp_sharded", "pipeline:stages=2,microbatches=2",
        "pipeline:stages=2,microbatches=2,schedule=interleaved_1f1b,virtual_stages=2",
        "tensor_parallel:plan=body.0:colwise|body.2:rowwise"}) {
    const auto on_cpu = step_lines(run_print_steps(strategy, 2, "adam", two_ranks(strategy, "cpu")));
    ASSERT_EQ(on_cpu.size(), 2u) << strategy;
    ASSERT_GE(on_cpu.at(0).size(), 3u) << strategy;
    // float32 on the GPU against the CPU: other kernels, other summation orders, the last bits.
    expect_steps_close(step_lines(run_print_steps(strategy, 2, "adam", two_ranks(strategy, "cuda"))), on_cpu, 1e-5,
                       strategy + " on cuda:0 (2 processes, gloo) vs the CPU");
  }
}

}  // namespace
}  // namespace volt::testing

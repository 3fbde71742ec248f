// PyTorch as the oracle of volt's ddp comm hooks and post-local-SGD through the Trainer (issue
// 34.2): `--strategy ddp:comm_hook=...` selected by name in volt's Trainer (the distributed
// worker's --mode train: the regression MLP, SGD with momentum or Adam, 2 epochs), against
// torch.nn.parallel.DistributedDataParallel with PyTorch's own hooks registered
// (register_comm_hook: fp16/bf16_compress_hook, powerSGD_hook, batched_powerSGD_hook, the
// fp16/bf16 wrappers, post_localSGD_hook over dist.new_subgroups) and, for post-local-SGD,
// PostLocalSGDOptimizer with PeriodicModelAverager or HierarchicalModelAverager
// (tests/strategies/python/pytorch_ddp_reference.py, which maps every key a case names and refuses
// one it cannot). Every rank's parameters after every optimizer step, the rank, step and parameter
// named on a failure. The reference is the PyTorch of this build's LibTorch (reference_python():
// 1.13 or 2.11). tests/ddp/comm_hook_parity_test.cpp and post_local_sgd_parity_test.cpp compare
// the same hooks wired to volt's reducer in a test; this one goes through the registry, the
// strategy, the Trainer and volt's launcher.
//
// The tolerance, 1e-6 relative. On 2 ranks every case is bitwise equal under 1.13 (a sum of two
// does not depend on its order). On 3 and 4 ranks volt's float32 all-reduce (halving-doubling,
// Note [Inline all_reduce]) adds the ranks' values in another order than Gloo's ring in PyTorch's
// process group: the last bit of some elements differs (measured at most 1.2e-7 relative over
// the run). The step counts: 16 on 2 ranks, 12 on 3 (DistributedSampler pads 64 samples to 66), 8 on 4.
//
// Left out:
// - float16 on 3 ranks (measured): fp16_compress, and the fp16 wrapper around allreduce, which is
//   the same arithmetic. PyTorch's first bucket, before DDP rebuilds its buckets after the first
//   iteration, holds the parameters in registration order; volt's in reverse registration order
//   (strategies/ddp/reducer.cpp, Note [Rebuilt buckets]). Gloo's ring sums each element's three
//   float16 values in an order that depends on its offset in the bucket, so 14 of the 61
//   parameters differ by one float16 rounding at step 1 (at most 2.4e-5), and the run carries it
//   (7e-4 relative at step 12). With volt's layout forced onto PyTorch's first bucket (an
//   experiment, not in the reference) the 3-rank fp16 run is bitwise volt's; after the rebuild
//   both layouts are the same.
// - bfloat16 on 3 ranks: PyTorch 1.13 has no bfloat16 reduction over Gloo to compare with (the
//   reference's stand-in, comm_hook_reference.py's all_gather and bfloat16 additions, adds in one
//   fixed order: Gloo's only for two ranks); under 2.2+ volt reduces bfloat16 in halving-doubling
//   order and PyTorch's Gloo in its ring's, as for float32 above, but each addition rounded to
//   bfloat16.
// - float16 compression around PowerSGD: Debian's CPU LibTorch 1.13 has no float16 matrix
//   product (volt refuses comm_wrapper=fp16 around powersgd there); the bf16 wrapper instead.
#include <gtest/gtest.h>

#include "tests/strategies/reference_runs.h"

namespace volt::testing {
namespace {

void expect_volt_trains_like_pytorch(int64_t world, const std::vector<ReferenceCase>& cases) {
  expect_volt_trains_like({"PyTorch " + reference_torch_version() + " DDP", reference_python(),
                           "pytorch_ddp_reference.py"},
                          world, cases);
}

TEST(CommHooksEqualPyTorchDDPHooks, Fp16Bf16NoopAndTheWrappersOnTwoAndThreeRanks) {
  expect_volt_trains_like_pytorch(2, {{"ddp:comm_hook=fp16_compress", "momentum"},
                                      {"ddp:comm_hook=allreduce,comm_wrapper=fp16", "momentum"},
                                      {"ddp:comm_hook=bf16_compress", "adam"},
                                      {"ddp:ddp_comm_hook=allreduce,ddp_comm_wrapper=bf16", "momentum"}});
  // float32 only on 3 ranks (see the top): the hook that divides before the sum, and noop, under
  // which every rank follows its own gradients. (DDP's default reduction on 3 ranks is compared
  // with torch's DDP in fairscale_oracle_test's ShardOptimizerEqualsFairscaleOSS.)
  expect_volt_trains_like_pytorch(3, {{"ddp:comm_hook=allreduce", "adam"}, {"ddp:comm_hook=noop", "momentum"}});
}

// start_powersgd_iter=3: 3 plain steps, then 13 (2 ranks) or 9 (3 ranks) compressed. Which of
// the MLP's matrices is compressed ((n+m)·r·rate < n·m): at rank 1, 4x8 by the default
// min_compression_rate (2), 4x4 as well with min_compression_rate=1; at rank 2 with rate 1, 4x8
// only; the vectors and 1x4 never. batched_powersgd compresses the whole bucket (61 values, 8x8).
constexpr const char* kPowerSGD = "ddp:comm_hook=powersgd,start_powersgd_iter=3";
constexpr const char* kBatched = "ddp:comm_hook=batched_powersgd,start_powersgd_iter=3";
constexpr const char* kCold = ",use_error_feedback=false,warm_start=false";

TEST(PowerSGDEqualsPyTorchPowerSGDHooks, BothHooksWithErrorFeedbackAndWarmStartOnAndOffAndTheBf16Wrapper) {
  const std::string powersgd = kPowerSGD, batched = kBatched, cold = kCold;
  expect_volt_trains_like_pytorch(2, {{powersgd, "momentum"},
                                      {powersgd + cold + ",min_compression_rate=1", "adam"},
                                      {batched, "momentum"},
                                      {powersgd + ",comm_wrapper=bf16", "momentum"},
                                      {batched + cold + ",comm_wrapper=bf16", "adam"}});
  expect_volt_trains_like_pytorch(3, {{powersgd + ",matrix_approximation_rank=2,min_compression_rate=1,use_error_feedback=false", "adam"}});
}

TEST(PostLocalSGDEqualsPyTorchPostLocalSGD, PeriodicAndHierarchicalAveragersWithSubgroupsOnTwoThreeAndFourRanks) {
  // Every rank its own subgroup on 2 and 3 ranks, pairs on 4; the averagers' warm-up is
  // start_local_sgd_iter, so the first local step ends with an average.
  expect_volt_trains_like_pytorch(
      2, {{"ddp:comm_hook=post_local_sgd,start_local_sgd_iter=4,model_averaging_period=3,subgroup_size=1", "momentum"},
          {"ddp:comm_hook=post_local_sgd,start_localSGD_iter=4,model_averaging_period=2,subgroup_size=1,"
           "post_local_gradient_allreduce=false",
           "adam"}});
  expect_volt_trains_like_pytorch(
      3, {{"ddp:comm_hook=post_local_sgd,start_local_sgd_iter=4,model_averaging_period=3,subgroup_size=1", "adam"}});
  expect_volt_trains_like_pytorch(
      4, {{"ddp:comm_hook=post_local_sgd,start_local_sgd_iter=3,model_averaging_period=2,subgroup_size=2", "momentum"},
          {"ddp:comm_hook=post_local_sgd,start_local_sgd_iter=3,model_averaging_periods=2:2,4:4,subgroup_size=2",
           "adam"}});
}

}  // namespace
}  // namespace volt::testing

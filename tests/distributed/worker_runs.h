#pragma once
// Running the distributed_worker program's train mode and reading what it prints
// ("TRAINED rank=.. params=.. val_samples=.. log_dir=.. env=.. restarts=.."), shared by the tests
// that compare several ranks with one process.
#include <gtest/gtest.h>

#include <algorithm>
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

// Every TRAINED line of `output`, by rank.
inline std::vector<Trained> trained_lines(const std::string& output) {
  static const std::regex pattern(
      "TRAINED rank=(\\d+) params=(\\S+) val_samples=(\\S+) log_dir=(\\S+) env=(\\w+) restarts=(\\d+)");
  std::vector<Trained> out;
  for (std::sregex_iterator it(output.begin(), output.end(), pattern), end; it != end; ++it) {
    Trained t{std::stoll((*it)[1]), {}, std::stod((*it)[3]), (*it)[4], (*it)[5], std::stoll((*it)[6])};
    std::stringstream params((*it)[2]);
    std::string value;
    while (std::getline(params, value, ',')) t.params.push_back(std::stod(value));
    out.push_back(t);
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

}  // namespace volt::testing

#pragma once
// An outside implementation as the oracle of a volt strategy selected by name through the Trainer
// (the distributed worker's --mode train, tests/distributed/worker_runs.h run_print_steps: the
// regression MLP, SGD with momentum or Adam, 2 epochs, batch 4 per rank), shared by the oracle
// tests beside it. Each case runs volt's worker, which prints its initial parameters and every
// rank's parameters after every optimizer step; then one launch of the reference script
// (tests/strategies/python/, the same problem in worker_problem.py) trains every case of that
// world size from the same initial parameters and prints "CASE k STEP ..." lines; every rank,
// step and parameter is compared, and a failure names them. One launch for all cases: importing
// PyTorch is most of a run.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "distributed/network.h"
#include "tests/distributed/worker_runs.h"

namespace volt::testing {

struct ReferenceCase {
  std::string strategy;   // volt's --strategy, which the reference maps to its own implementation
  std::string optimizer;  // momentum | adam
  std::string model = "mlp";
  std::string worker_flags;  // more flags for volt's worker (the pipeline: --limit-val-batches 0)
};

// Who the oracle is: `name` for messages ("fairscale"), `python` the command that runs `script`
// (a path below tests/strategies/python/).
struct Reference {
  std::string name, python, script;
};

inline std::string describe(const ReferenceCase& c, int64_t world, const Reference& reference) {
  return "--strategy " + c.strategy + " --optimizer " + c.optimizer + " --model " + c.model + " on " +
         std::to_string(world) + " ranks vs " + reference.name;
}

// The reference's "CASE k STEP ..." lines, as step_lines reads the worker's, one map per case.
inline std::vector<StepParameters> reference_steps(const std::string& output, size_t cases) {
  std::vector<std::string> per_case(cases);
  static const std::regex line("CASE (\\d+) (STEP [^\\n]*)");
  for (std::sregex_iterator it(output.begin(), output.end(), line), end; it != end; ++it) {
    const auto k = std::stoul((*it)[1]);
    if (k < cases) per_case[k] += std::string((*it)[2]) + "\n";
  }
  std::vector<StepParameters> steps;
  for (const auto& text : per_case) steps.push_back(step_lines(text));
  return steps;
}

// Runs every case through volt's Trainer on `world` ranks, then the reference once for all of
// them, and expects every rank's parameters after every step within `tolerance` (relative,
// absolute below 1) of the reference's.
inline void expect_volt_trains_like(const Reference& reference, int64_t world, const std::vector<ReferenceCase>& cases,
                                    double tolerance = 1e-6) {
  TemporaryDirectory dir;
  std::vector<StepParameters> volt;
  std::string command = reference.python + " " + VOLT_SOURCE_DIR + "/tests/strategies/python/" + reference.script +
                        " --world " + std::to_string(world) + " --port " + std::to_string(find_free_port());
  for (size_t k = 0; k < cases.size(); ++k) {
    const auto& c = cases[k];
    const auto output =
        run_print_steps(c.strategy, world, c.optimizer, "--model " + c.model + " --print-initial " + c.worker_flags);
    std::smatch initial;
    ASSERT_TRUE(std::regex_search(output, initial, std::regex("INITIAL params=(\\S+)")))
        << describe(c, world, reference) << ": volt printed no INITIAL line:\n" << output;
    const auto file = dir.path() + "/initial" + std::to_string(k);
    std::ofstream(file) << initial[1];
    command += " --case '" + c.strategy + ";" + c.optimizer + ";" + c.model + ";" + file + "'";
    volt.push_back(step_lines(output));
  }
  const auto result = run_command(command + " 2>&1", 300);
  ASSERT_EQ(result.exit_code, 0) << "the " << reference.name << " reference failed:\n" << result.output;
  const auto expected = reference_steps(result.output, cases.size());
  for (size_t k = 0; k < cases.size(); ++k) {
    ASSERT_EQ(expected[k].size(), static_cast<size_t>(world)) << describe(cases[k], world, reference) << ":\n"
                                                              << result.output;
    expect_steps_close(volt[k], expected[k], tolerance, describe(cases[k], world, reference));
  }
}

}  // namespace volt::testing

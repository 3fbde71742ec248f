#pragma once
// What the benchmarks share: reading their flags, summarizing repeated timings, running ranks as
// processes and reading what they print.
#include <sys/wait.h>
#include <unistd.h>

#include <boost/program_options.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <iostream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "bench/run_ranks.h"
#include "core/error.h"

namespace volt::bench {

// What volt's Trainer sets with mallopt at fit start (core/malloc_tuning.cpp), as glibc
// tunables, so that volt's and PyTorch's benchmark workers run with the same allocator.
inline constexpr const char* kTrainerMallocTunables =
    "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824";

// The median of `values` (the mean of the middle two for an even count); robust to the outliers
// a shared machine produces. Expects at least one value.
inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

// Runs `step` warmup + steps times, `before_each` (a barrier, so that both ranks start together)
// ahead of every one, and returns the milliseconds each timed `step` took (not `before_each`).
template <typename BeforeEach, typename Step>
std::vector<double> timed_steps(int warmup, int steps, BeforeEach before_each, Step step) {
  std::vector<double> milliseconds;
  for (int i = 0; i < warmup + steps; ++i) {
    before_each();
    const auto start = std::chrono::steady_clock::now();
    step();
    const auto end = std::chrono::steady_clock::now();
    if (i >= warmup) milliseconds.push_back(std::chrono::duration<double, std::milli>(end - start).count());
  }
  return milliseconds;
}

// Stores argv into the variables `flags` binds. Returns false after printing the flags when
// --help was given (the benchmark should then stop); throws on an unknown flag or a bad value.
inline bool parse_flags(int argc, char** argv, const boost::program_options::options_description& flags) {
  boost::program_options::variables_map values;
  boost::program_options::store(boost::program_options::parse_command_line(argc, argv, flags), values);
  boost::program_options::notify(values);
  if (values.count("help")) {
    std::cout << flags;
    return false;
  }
  return true;
}

// Starts one process per entry of `argvs` (argv[0] found on PATH), each with `environment` added
// to its own, waits for all (at most a day) and returns what the first one wrote to stdout (the
// others' stdout is inherited). Throws volt::Error naming `who` when a process fails, with the
// first one's output.
inline std::string run_processes(const std::vector<std::vector<std::string>>& argvs,
                                 const std::vector<std::pair<std::string, std::string>>& environment,
                                 const std::string& who) {
  const std::map<std::string, std::string> env(environment.begin(), environment.end());
  const auto result = run_ranks(argvs, std::vector<std::map<std::string, std::string>>(argvs.size(), env),
                                std::chrono::hours(24));
  check<Error>(result.ok(), who, ": a process (", argvs.front().front(), ") failed: ", result.describe(),
               "; output of the first: ", result.output);
  return result.output;
}

// The number written right after `key` in `output` ("STEP_MS 1.5" with key "STEP_MS ", "x=2" with
// key "x="). Throws volt::Error naming `who` when it is not there.
inline double number_after(const std::string& output, const std::string& key, const std::string& who) {
  const std::regex pattern(key + "([0-9.eE+-]+)");
  std::smatch match;
  check<Error>(std::regex_search(output, match, pattern), who, ": no '", key, "' in: ", output);
  return std::stod(match[1]);
}

// Bytes of the distinct storages behind `tensors` (undefined ones skipped): memory counted from
// live tensors, views and shared storages once.
inline int64_t storage_bytes(const std::vector<torch::Tensor>& tensors) {
  std::unordered_set<const void*> seen;
  int64_t bytes = 0;
  for (const auto& t : tensors) {
    if (t.defined() && seen.insert(t.storage().data()).second) bytes += static_cast<int64_t>(t.storage().nbytes());
  }
  return bytes;
}

// Runs `command` in a shell and returns its stdout and stderr; throws volt::Error naming `who`
// with the output when it fails.
inline std::string run_shell(const std::string& command, const std::string& who) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  check<Error>(pipe != nullptr, who, ": cannot run ", command);
  std::string output;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) output.append(buffer, n);
  const int status = pclose(pipe);
  check<Error>(status == 0, who, ": '", command, "' failed (", status, "):\n", output);
  return output;
}

// This program's path, for re-executing itself as a worker.
inline std::string self_path(const std::string& who) {
  char exe[4096];
  const ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  check<Error>(len > 0, who, ": cannot read /proc/self/exe");
  return std::string(exe, static_cast<size_t>(len));
}

// The items of a comma-separated list ("cnn,mlp"), empty ones dropped.
inline std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> items;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) items.push_back(item);
  }
  return items;
}

inline double mib(double bytes) { return bytes / (1 << 20); }

}  // namespace volt::bench

#pragma once
// What the memory benchmarks (sharding_memory, fsdp_memory) share. Each re-executes itself as a
// multi-rank Trainer worker per strategy; every rank prints one line at the end of training,
//   RANK <rank> step_ms <median ms per step after warm-up> <key> <bytes> ... rss <bytes>
// (PyTorch's side, bench/sharding_memory_worker.py, prints the same), and the runs of the
// strategies are interleaved over rounds so that a slow phase of the machine hits all of them.
#include <sys/resource.h>

#include <boost/program_options.hpp>

#include <chrono>
#include <iostream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench_support.h"
#include "strategies/sharded/oss.h"
#include "trainer/run_main.h"
#include "trainer/volt.h"

namespace volt::bench {

struct RankedFlags {
  int rounds = 2, steps = 12, warmup = 3;
  std::string ranks = "2,4";     // world sizes, comma-separated
  std::string worker_strategy;   // set: this process is a worker
  int64_t worker_ranks = 0;

  std::vector<int64_t> world_sizes() const {
    std::vector<int64_t> sizes;
    std::stringstream in(ranks);
    for (std::string r; std::getline(in, r, ',');) sizes.push_back(std::stoll(r));
    return sizes;
  }
  // `program` (this benchmark) as a worker training `strategy` on `world` processes.
  std::string worker_command(const std::string& program, const std::string& strategy, int64_t world) const {
    return program + " --worker \"" + strategy + "\" --worker-ranks " + std::to_string(world) + " --steps " +
           std::to_string(steps) + " --warmup " + std::to_string(warmup);
  }
};

// --rounds, --steps, --warmup, --ranks and the internal --worker, --worker-ranks, defaulting to
// `flags`' values. False when --help was printed.
inline bool parse_ranked_flags(int argc, char** argv, const std::string& name, RankedFlags& flags) {
  namespace po = boost::program_options;
  po::options_description description(name);
  description.add_options()("help", "this text")(
      "rounds", po::value(&flags.rounds)->default_value(flags.rounds), "interleaved rounds")(
      "steps", po::value(&flags.steps)->default_value(flags.steps), "timed steps per run")(
      "warmup", po::value(&flags.warmup)->default_value(flags.warmup), "untimed steps per run")(
      "ranks", po::value(&flags.ranks)->default_value(flags.ranks), "world sizes, comma-separated")(
      "worker", po::value(&flags.worker_strategy), "internal: train with this strategy")(
      "worker-ranks", po::value(&flags.worker_ranks), "internal: on this many ranks");
  return parse_flags(argc, argv, description);
}

// The main of such a benchmark: the ranked flags parsed (`flags` holding its defaults), then in a
// worker process `worker`, else `compare` (which starts the workers) with this program's path.
inline int ranked_benchmark_main(int argc, char** argv, const std::string& name, RankedFlags flags,
                                 const std::function<void(ProcessLauncher&, const RankedFlags&)>& worker,
                                 const std::function<void(const RankedFlags&, const std::string&)>& compare) {
  return run_main([&](ProcessLauncher& launcher) {
    if (!parse_ranked_flags(argc, argv, name, flags)) return;
    if (!flags.worker_strategy.empty()) {
      worker(launcher, flags);
      return;
    }
    compare(flags, self_path(name));
  });
}

// A worker's Trainer: `flags.worker_strategy` on worker_ranks CPU processes for warmup + steps
// steps, and nothing else (no loggers, checkpoints, progress bar, summary or sanity check).
inline TrainerOptions worker_trainer_options(const RankedFlags& flags, const std::string& root) {
  TrainerOptions options;
  options.strategy = flags.worker_strategy;
  options.devices = flags.worker_ranks;
  options.accelerator = "cpu";
  options.max_steps = flags.steps + flags.warmup;
  options.loggers.clear();
  options.enable_checkpointing = false;
  options.enable_progress_bar = false;
  options.enable_model_summary = false;
  options.num_sanity_val_steps = 0;
  options.default_root_dir = root;
  return options;
}

// Times the steps after warm-up and prints the rank's RANK line at the end of training with the
// bytes memory() reports and ru_maxrss.
class RankReporter : public Callback {
 public:
  explicit RankReporter(int warmup) : warmup_(warmup) {}

  void on_train_batch_end(Trainer&, Module&, const torch::Tensor&, const Batch&, int64_t) override {
    const auto now = std::chrono::steady_clock::now();
    if (++batches_ > warmup_) times_.push_back(std::chrono::duration<double, std::milli>(now - last_).count());
    last_ = now;
  }

  void on_train_end(Trainer& trainer, Module& module) override {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    std::ostringstream line;
    line << "RANK " << trainer.strategy().topology().global_rank << " step_ms " << median(times_);
    for (const auto& [key, bytes] : memory(trainer, module)) line << " " << key << " " << bytes;
    line << " rss " << usage.ru_maxrss * 1024 << "\n";
    std::cout << line.str() << std::flush;
  }

  // Bytes of the Adam state of the optimizer that steps on this rank (OSS: its local shard's).
  static int64_t adam_state_bytes(torch::optim::Optimizer& optimizer) {
    auto* oss = dynamic_cast<OSS*>(&optimizer);
    auto& stepping = oss ? oss->local() : optimizer;
    std::vector<torch::Tensor> tensors;
    for (const auto& [key, state] : stepping.state()) {
      const auto& adam = static_cast<const torch::optim::AdamParamState&>(*state);
      tensors.push_back(adam.exp_avg());
      tensors.push_back(adam.exp_avg_sq());
      tensors.push_back(adam.max_exp_avg_sq());
    }
    return storage_bytes(tensors);
  }

 protected:
  // The memory columns this benchmark reports, in order.
  virtual std::vector<std::pair<std::string, int64_t>> memory(Trainer& trainer, Module& module) = 0;

 private:
  int warmup_;
  int batches_ = 0;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
  std::vector<double> times_;
};

// A run's RANK lines: every key's largest value over the ranks (the largest rank's memory),
// except step_ms: the median rank's (all ranks wait for each other). Throws naming `who` unless
// there is one line per rank.
using RankReport = std::map<std::string, double>;
inline RankReport parse_rank_report(const std::string& output, int64_t ranks, const std::string& who) {
  // Values are numbers, matched as such: two ranks' lines can run together when a process writes
  // its newline separately (Python's print does), "... rss 123RANK 1 step_ms ...".
  static const std::regex line_pattern("RANK \\d+ step_ms ([0-9.eE+-]+)((?: [a-z_]+ [0-9.eE+-]+)*)");
  RankReport most;
  std::vector<double> step_ms;
  for (std::sregex_iterator it(output.begin(), output.end(), line_pattern), end; it != end; ++it) {
    step_ms.push_back(std::stod((*it)[1]));
    std::stringstream pairs((*it)[2].str());
    std::string key, value;
    while (pairs >> key >> value) most[key] = std::max(most[key], std::stod(value));
  }
  check<Error>(static_cast<int64_t>(step_ms.size()) == ranks, who, ": expected ", ranks, " RANK lines, got ",
               step_ms.size(), "; output:\n", output);
  most["step_ms"] = median(step_ms);
  return most;
}

// Runs every (name, command) `rounds` times, interleaved; per name, the step time of each round
// and the last round's report.
struct InterleavedRuns {
  std::map<std::string, std::vector<double>> step_ms;
  std::map<std::string, RankReport> report;
  double median_ms(const std::string& name) const { return median(step_ms.at(name)); }
};
inline InterleavedRuns run_interleaved(const std::vector<std::pair<std::string, std::string>>& commands, int rounds,
                                       int64_t ranks, const std::string& who) {
  InterleavedRuns runs;
  for (int round = 0; round < rounds; ++round) {
    for (const auto& [name, command] : commands) {
      auto report = parse_rank_report(run_shell(command, who), ranks, who);
      runs.step_ms[name].push_back(report.at("step_ms"));
      runs.report[name] = std::move(report);
    }
  }
  return runs;
}

}  // namespace volt::bench

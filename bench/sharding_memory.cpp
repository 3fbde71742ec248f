// Memory and step time of optimizer-state and gradient sharding (issue 16): `ddp`,
// `ddp:shard_optimizer=true` (ZeRO-1) and `ddp_sharded` (ZeRO-2) through volt's Trainer and
// launcher, against PyTorch's DDP + ZeroRedundancyOptimizer (bench/sharding_memory_worker.py
// under Debian's /usr/bin/python3), on the same ~10M-parameter MLP with Adam, 2 and 4 ranks over
// Gloo on 127.0.0.1, one compute thread per rank.
//
// Per rank, counted from live tensors and counters (not from formulas):
//   params   bytes of the module's parameters;
//   grads    bytes of the distinct storages of the parameters' .grad right before the optimizer
//            step (ShardedDDP leaves only the owner's);
//   buffers  communication buffers: DDP's bucket buffers (kept), ShardedDDP's reduce buffers (the
//            most alive at once during a backward, from ShardedReducer::peak_buffer_bytes);
//   state    bytes of the Adam state (exp_avg, exp_avg_sq) of the optimizer that steps on the rank
//            (OSS: its local shard optimizer);
//   peak RSS the process's ru_maxrss.
// PyTorch's workers get the Trainer's malloc settings (GLIBC_TUNABLES), as in ddp_vs_torch.
// Step time: median interval between consecutive train-batch ends after warm-up (the whole step:
// forward, backward, communication, optimizer step, parameter broadcast). Memory columns show the
// largest rank; rounds interleave the runs and the table shows the median step time over rounds.
//
//   build/bench/sharding_memory [--rounds 2] [--steps 12] [--warmup 3] [--ranks 2,4]
// A volt row's ranks are this program re-executed with --worker (the Trainer's launcher starts them).
#include <sys/resource.h>
#include <unistd.h>

#include <boost/program_options.hpp>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <regex>
#include <sstream>
#include <unordered_set>

#include "bench/bench_support.h"
#include "distributed/network.h"
#include "strategies/ddp/ddp_strategy.h"
#include "strategies/sharded/oss.h"
#include "strategies/sharded/sharded_ddp_strategy.h"
#include "trainer/run_main.h"
#include "trainer/volt.h"

namespace po = boost::program_options;

namespace {

using Clock = std::chrono::steady_clock;
using volt::bench::median;
using volt::bench::mib;
using volt::bench::storage_bytes;

// 12 equal hidden layers (10.0M parameters): OSS partitions whole parameters, so equal layers let
// 2, 3, 4 or 6 ranks hold equal shares (an uneven model shifts the largest rank's share up).
const std::vector<int64_t> kWidths{912, 912, 912, 912, 912, 912, 912, 912, 912, 912, 912, 912, 912, 10};
constexpr int64_t kBatch = 32;                                  // per rank

int64_t parameter_count() {
  int64_t n = 0;
  for (size_t i = 0; i + 1 < kWidths.size(); ++i) n += kWidths[i] * kWidths[i + 1] + kWidths[i + 1];
  return n;
}

class Mlp : public volt::Module {
 public:
  Mlp() {
    for (size_t i = 0; i + 1 < kWidths.size(); ++i) {
      net->push_back(torch::nn::Linear(kWidths[i], kWidths[i + 1]));
      if (i + 2 < kWidths.size()) net->push_back(torch::nn::ReLU());
    }
    register_module("net", net);
  }
  torch::Tensor training_step(const volt::Batch& batch, int64_t) override {
    return torch::mse_loss(net->forward(batch.input), batch.target);
  }
  volt::OptimizerConfig configure_optimizers() override {
    return volt::OptimizerConfig(std::make_shared<torch::optim::Adam>(parameters(), torch::optim::AdamOptions(1e-3)));
  }
  torch::nn::Sequential net;
};

// Counts what the table reports, on every rank, and prints it at the end of training.
class MemoryProbe : public volt::Callback {
 public:
  explicit MemoryProbe(int warmup) : warmup_(warmup) {}

  void on_before_optimizer_step(volt::Trainer&, volt::Module& module, torch::optim::Optimizer&) override {
    std::vector<torch::Tensor> grads;
    for (const auto& p : module.parameters()) grads.push_back(p.grad());
    grad_bytes_ = std::max(grad_bytes_, storage_bytes(grads));
  }

  void on_train_batch_end(volt::Trainer&, volt::Module&, const torch::Tensor&, const volt::Batch&, int64_t) override {
    const auto now = Clock::now();
    if (++batches_ > warmup_) times_.push_back(std::chrono::duration<double, std::milli>(now - last_).count());
    last_ = now;
  }

  void on_train_end(volt::Trainer& trainer, volt::Module& module) override {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    std::ostringstream line;
    line << "RANK " << trainer.strategy().topology().global_rank << " step_ms " << median(times_) << " params "
         << storage_bytes(module.parameters()) << " grads " << grad_bytes_ << " buffers "
         << buffer_bytes(trainer.strategy()) << " state " << adam_state_bytes(*trainer.optimizers().at(0))
         << " rss " << usage.ru_maxrss * 1024 << "\n";
    std::cout << line.str() << std::flush;
  }

 private:
  static int64_t buffer_bytes(volt::Strategy& strategy) {
    if (auto* ddp = dynamic_cast<volt::DDPStrategy*>(&strategy)) {
      std::vector<torch::Tensor> buffers;
      for (size_t b = 0; b < ddp->reducer().num_buckets(); ++b) buffers.push_back(ddp->reducer().bucket(b).buffer());
      return storage_bytes(buffers);
    }
    if (auto* sharded = dynamic_cast<volt::ShardedDDPStrategy*>(&strategy)) return sharded->reducer().peak_buffer_bytes();
    return 0;
  }

  static int64_t adam_state_bytes(torch::optim::Optimizer& optimizer) {
    auto* oss = dynamic_cast<volt::OSS*>(&optimizer);
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

  int warmup_;
  int batches_ = 0;
  Clock::time_point last_ = Clock::now();
  std::vector<double> times_;
  int64_t grad_bytes_ = 0;
};

void run_worker(volt::ProcessLauncher& launcher, const std::string& strategy, int64_t ranks, int steps, int warmup) {
  volt::TrainerOptions options;
  options.strategy = strategy;
  options.devices = ranks;
  options.accelerator = "cpu";
  options.max_steps = steps + warmup;
  options.loggers.clear();
  options.enable_checkpointing = false;
  options.enable_progress_bar = false;
  options.enable_model_summary = false;
  options.num_sanity_val_steps = 0;
  options.default_root_dir = "/tmp/volt_sharding_memory";
  volt::Trainer trainer(options, launcher);
  trainer.add_callback(std::make_shared<MemoryProbe>(warmup));
  torch::manual_seed(0);
  auto module = std::make_shared<Mlp>();
  const int64_t samples = ranks * kBatch * (steps + warmup);
  auto data = std::make_shared<volt::TensorDataset>(torch::randn({samples, kWidths.front()}),
                                                    torch::randn({samples, kWidths.back()}));
  volt::DataLoaderOptions loader;
  loader.batch_size = kBatch;
  trainer.fit(module, std::make_shared<volt::DataLoader>(data, loader));
}

struct RankNumbers {
  double step_ms = 0, params = 0, grads = 0, buffers = 0, state = 0, rss = 0;
};

// The RANK lines of `output`: the median rank's step time (all ranks wait for each other) and
// the largest rank's memory.
RankNumbers parse_ranks(const std::string& output, int64_t ranks) {
  static const std::regex pattern(
      "RANK (\\d+) step_ms (\\S+) params (\\d+) grads (\\d+) buffers (\\d+) state (\\d+) rss (\\d+)");
  RankNumbers most;
  std::vector<double> step_ms;
  for (std::sregex_iterator it(output.begin(), output.end(), pattern), end; it != end; ++it) {
    step_ms.push_back(std::stod((*it)[2]));
    most.params = std::max(most.params, std::stod((*it)[3]));
    most.grads = std::max(most.grads, std::stod((*it)[4]));
    most.buffers = std::max(most.buffers, std::stod((*it)[5]));
    most.state = std::max(most.state, std::stod((*it)[6]));
    most.rss = std::max(most.rss, std::stod((*it)[7]));
  }
  volt::check<volt::Error>(static_cast<int64_t>(step_ms.size()) == ranks, "sharding_memory: expected ", ranks,
                           " RANK lines, got ", step_ms.size(), "; output:\n", output);
  most.step_ms = median(step_ms);
  return most;
}

}  // namespace

int main(int argc, char** argv) {
  return volt::run_main([&](volt::ProcessLauncher& launcher) {
    std::string worker_strategy, ranks_text;
    int rounds = 2, steps = 12, warmup = 3;
    int64_t worker_ranks = 0;
    po::options_description flags("sharding_memory");
    flags.add_options()("help", "this text")("rounds", po::value(&rounds)->default_value(2), "interleaved rounds")(
        "steps", po::value(&steps)->default_value(12), "timed steps per run")(
        "warmup", po::value(&warmup)->default_value(3), "untimed steps per run")(
        "ranks", po::value(&ranks_text)->default_value("2,4"), "world sizes, comma-separated")(
        "worker", po::value(&worker_strategy), "internal: train with this strategy")(
        "worker-ranks", po::value(&worker_ranks), "internal: on this many ranks");
    if (!volt::bench::parse_flags(argc, argv, flags)) return;
    setenv("OMP_NUM_THREADS", "1", 1);
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    if (!worker_strategy.empty()) {
      torch::set_num_threads(1);
      run_worker(launcher, worker_strategy, worker_ranks, steps, warmup);
      return;
    }
    const std::string program = volt::bench::self_path("sharding_memory");
    const std::string script = std::string(VOLT_SOURCE_DIR) + "/bench/sharding_memory_worker.py";
    const std::vector<std::string> strategies{"ddp", "ddp:shard_optimizer=true", "ddp_sharded", "torch ZeRO"};
    std::printf("Optimizer-state and gradient sharding, %lld-parameter MLP %s, Adam, batch %lld per rank, Gloo on\n"
                "127.0.0.1, 1 thread per rank, %d rounds interleaved, %d timed steps (+%d warm-up). MiB per rank\n"
                "(the largest rank) counted from live tensors; step time: median ms per step.\n\n",
                static_cast<long long>(parameter_count()), "912x13-10", static_cast<long long>(kBatch),
                rounds, steps, warmup);
    std::printf("| ranks | strategy                 | params | grads | buffers | Adam state | peak RSS | ms/step | vs ddp "
                "| vs torch ZeRO |\n|---|---|---|---|---|---|---|---|---|---|\n");
    std::stringstream ranks_in(ranks_text);
    for (std::string r; std::getline(ranks_in, r, ',');) {
      const int64_t ranks = std::stoll(r);
      std::map<std::string, std::vector<double>> times;
      std::map<std::string, RankNumbers> memory;
      const std::string common = " --steps " + std::to_string(steps) + " --warmup " + std::to_string(warmup);
      for (int round = 0; round < rounds; ++round) {
        for (const auto& strategy : strategies) {
          const std::string command =
              strategy == "torch ZeRO"
                  ? std::string("GLIBC_TUNABLES=") + volt::bench::kTrainerMallocTunables + " /usr/bin/python3 " + script + " " + std::to_string(ranks) + " " +
                        std::to_string(volt::find_free_port()) + " " + std::to_string(steps) + " " +
                        std::to_string(warmup)
                  : program + " --worker " + strategy + " --worker-ranks " + std::to_string(ranks) + common;
          const auto numbers = parse_ranks(volt::bench::run_shell(command, "sharding_memory"), ranks);
          times[strategy].push_back(numbers.step_ms);
          memory[strategy] = numbers;
        }
      }
      const double ddp_ms = median(times["ddp"]), zero_ms = median(times["torch ZeRO"]);
      for (const auto& strategy : strategies) {
        const auto& m = memory[strategy];
        const double ms = median(times[strategy]);
        std::printf("| %5lld | %-24s | %6.1f | %5.1f | %7.1f | %10.1f | %8.0f | %7.1f | %5.2fx | %12.2fx |\n",
                    static_cast<long long>(ranks), strategy.c_str(), mib(m.params), mib(m.grads), mib(m.buffers),
                    mib(m.state), mib(m.rss), ms, ms / ddp_ms, ms / zero_ms);
      }
      std::fflush(stdout);
    }
  });
}

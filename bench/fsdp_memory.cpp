// Memory and step time of FSDP (issue 18): `ddp`, `ddp_sharded` and `fsdp` resharding after
// forward or not, through volt's Trainer and launcher, on a ~20M-parameter MLP of 8 equal blocks
// (Linear 1580x1580, auto-wrapped one unit each by min_num_params=1e6), Adam, 2 and 4 ranks over
// Gloo on 127.0.0.1, one compute thread per rank.
//
// Per rank, counted from live tensors and counters (not from formulas), the largest rank shown:
//   params    bytes of the parameters the rank keeps: the module's, plus the optimizer's (FSDP's
//             flat shards; its released parameters hold no bytes);
//   gathered  FSDP: the most bytes of gathered parameters alive at once during a step (the
//             strategy's fsdp/peak_gathered_bytes); 0 for the others, whose parameters are whole;
//   grads     bytes of the gradients alive right before the optimizer step (module's and
//             optimizer's, distinct storages);
//   state     bytes of the Adam state of the optimizer that steps on the rank (OSS: its shard);
//   model     params + gathered + grads + state;
//   peak RSS  the process's ru_maxrss.
// Not in these columns: communication buffers (DDP's buckets, ShardedDDP's reduce buffers,
// FSDP's flat gradient of the unit being reduce-scattered) and activations.
// Step time: median interval between consecutive train-batch ends after warm-up; the median
// rank; rounds interleave the runs and the table shows the median over rounds.
//
//   build/bench/fsdp_memory [--rounds 2] [--steps 8] [--warmup 2] [--ranks 2,4]
#include <sys/resource.h>

#include <boost/program_options.hpp>

#include <chrono>
#include <cstdio>
#include <map>
#include <regex>
#include <sstream>

#include "bench/bench_support.h"
#include "strategies/sharded/oss.h"
#include "trainer/run_main.h"
#include "trainer/volt.h"

namespace po = boost::program_options;

namespace {

using Clock = std::chrono::steady_clock;
using volt::bench::median;
using volt::bench::mib;
using volt::bench::storage_bytes;

constexpr int64_t kWidth = 1580, kBlocks = 8, kBatch = 16;  // 8 x (1580 x 1580 + 1580) = 19.98M parameters

class BlockMlp : public volt::Module {
 public:
  BlockMlp() {
    for (int64_t i = 0; i < kBlocks; ++i) {
      net->push_back(torch::nn::Linear(kWidth, kWidth));
      if (i + 1 < kBlocks) net->push_back(torch::nn::ReLU());
    }
    register_module("net", net);
  }
  torch::Tensor training_step(const volt::Batch& batch, int64_t) override {
    return torch::mse_loss(net->forward(batch.input), batch.target);
  }
  volt::OptimizerConfig configure_optimizers() override {
    return volt::OptimizerConfig(std::make_shared<torch::optim::Adam>(parameters(), torch::optim::AdamOptions(1e-4)));
  }
  torch::nn::Sequential net;
};

std::vector<torch::Tensor> kept_parameters(volt::Module& module, torch::optim::Optimizer& optimizer) {
  auto tensors = module.parameters();
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) tensors.push_back(p);
  }
  return tensors;
}

class MemoryProbe : public volt::Callback {
 public:
  explicit MemoryProbe(int warmup) : warmup_(warmup) {}

  void on_before_optimizer_step(volt::Trainer&, volt::Module& module, torch::optim::Optimizer& optimizer) override {
    std::vector<torch::Tensor> grads;
    for (const auto& p : kept_parameters(module, optimizer)) grads.push_back(p.grad());
    grad_bytes_ = std::max(grad_bytes_, storage_bytes(grads));
    param_bytes_ = std::max(param_bytes_, storage_bytes(kept_parameters(module, optimizer)));
  }

  void on_train_batch_end(volt::Trainer& trainer, volt::Module&, const torch::Tensor&, const volt::Batch&,
                          int64_t) override {
    const auto now = Clock::now();
    if (++batches_ > warmup_) times_.push_back(std::chrono::duration<double, std::milli>(now - last_).count());
    last_ = now;
    const auto metrics = trainer.strategy().metrics();
    if (auto it = metrics.find("fsdp/peak_gathered_bytes"); it != metrics.end()) {
      gathered_bytes_ = std::max(gathered_bytes_, static_cast<int64_t>(it->second));
    }
    state_bytes_ = std::max(state_bytes_, adam_state_bytes(*trainer.optimizers().at(0)));
  }

  void on_train_end(volt::Trainer& trainer, volt::Module&) override {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    std::ostringstream line;
    line << "RANK " << trainer.strategy().topology().global_rank << " step_ms " << median(times_) << " params "
         << param_bytes_ << " gathered " << gathered_bytes_ << " grads " << grad_bytes_ << " state " << state_bytes_
         << " rss " << usage.ru_maxrss * 1024 << "\n";
    std::cout << line.str() << std::flush;
  }

 private:
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
  int64_t param_bytes_ = 0, gathered_bytes_ = 0, grad_bytes_ = 0, state_bytes_ = 0;
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
  options.threads = 1;
  options.default_root_dir = "/tmp/volt_fsdp_memory";
  volt::Trainer trainer(options, launcher);
  trainer.add_callback(std::make_shared<MemoryProbe>(warmup));
  torch::manual_seed(0);
  auto module = std::make_shared<BlockMlp>();
  const int64_t samples = ranks * kBatch * (steps + warmup);
  auto data = std::make_shared<volt::TensorDataset>(torch::randn({samples, kWidth}), torch::randn({samples, kWidth}));
  volt::DataLoaderOptions loader;
  loader.batch_size = kBatch;
  trainer.fit(module, std::make_shared<volt::DataLoader>(data, loader));
}

struct RankNumbers {
  double step_ms = 0, params = 0, gathered = 0, grads = 0, state = 0, rss = 0;
  double model() const { return params + gathered + grads + state; }
};

RankNumbers parse_ranks(const std::string& output, int64_t ranks) {
  static const std::regex pattern(
      "RANK (\\d+) step_ms (\\S+) params (\\d+) gathered (\\d+) grads (\\d+) state (\\d+) rss (\\d+)");
  RankNumbers most;
  std::vector<double> step_ms;
  for (std::sregex_iterator it(output.begin(), output.end(), pattern), end; it != end; ++it) {
    step_ms.push_back(std::stod((*it)[2]));
    most.params = std::max(most.params, std::stod((*it)[3]));
    most.gathered = std::max(most.gathered, std::stod((*it)[4]));
    most.grads = std::max(most.grads, std::stod((*it)[5]));
    most.state = std::max(most.state, std::stod((*it)[6]));
    most.rss = std::max(most.rss, std::stod((*it)[7]));
  }
  volt::check<volt::Error>(static_cast<int64_t>(step_ms.size()) == ranks, "fsdp_memory: expected ", ranks,
                           " RANK lines, got ", step_ms.size(), "; output:\n", output);
  most.step_ms = median(step_ms);
  return most;
}

}  // namespace

int main(int argc, char** argv) {
  return volt::run_main([&](volt::ProcessLauncher& launcher) {
    std::string worker_strategy, ranks_text;
    int rounds = 2, steps = 8, warmup = 2;
    int64_t worker_ranks = 0;
    po::options_description flags("fsdp_memory");
    flags.add_options()("help", "this text")("rounds", po::value(&rounds)->default_value(2), "interleaved rounds")(
        "steps", po::value(&steps)->default_value(8), "timed steps per run")(
        "warmup", po::value(&warmup)->default_value(2), "untimed steps per run")(
        "ranks", po::value(&ranks_text)->default_value("2,4"), "world sizes, comma-separated")(
        "worker", po::value(&worker_strategy), "internal: train with this strategy")(
        "worker-ranks", po::value(&worker_ranks), "internal: on this many ranks");
    if (!volt::bench::parse_flags(argc, argv, flags)) return;
    if (!worker_strategy.empty()) {
      run_worker(launcher, worker_strategy, worker_ranks, steps, warmup);
      return;
    }
    const std::string program = volt::bench::self_path("fsdp_memory");
    const std::vector<std::string> strategies{"ddp", "ddp_sharded", "fsdp:min_num_params=1e6",
                                              "fsdp:min_num_params=1e6,reshard_after_forward=false"};
    const double unit_bytes = static_cast<double>(kWidth * kWidth + kWidth) * 4;
    std::printf("FSDP memory, %lld-parameter MLP of %lld blocks (Linear %lldx%lld, one unit each), Adam, batch %lld\n"
                "per rank, Gloo on 127.0.0.1, 1 thread per rank, %d rounds interleaved, %d timed steps (+%d warm-up).\n"
                "MiB per rank (the largest rank) counted from live tensors; step time: median ms per step.\n\n",
                static_cast<long long>(kBlocks * (kWidth * kWidth + kWidth)), static_cast<long long>(kBlocks),
                static_cast<long long>(kWidth), static_cast<long long>(kWidth), static_cast<long long>(kBatch), rounds,
                steps, warmup);
    std::printf("| ranks | strategy | params | gathered | grads | Adam state | model state | goal | peak RSS | ms/step "
                "| vs ddp |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
    std::stringstream ranks_in(ranks_text);
    for (std::string r; std::getline(ranks_in, r, ',');) {
      const int64_t ranks = std::stoll(r);
      std::map<std::string, std::vector<double>> times;
      std::map<std::string, RankNumbers> memory;
      const std::string common = " --steps " + std::to_string(steps) + " --warmup " + std::to_string(warmup);
      for (int round = 0; round < rounds; ++round) {
        for (const auto& strategy : strategies) {
          const std::string command =
              program + " --worker \"" + strategy + "\" --worker-ranks " + std::to_string(ranks) + common;
          const auto numbers = parse_ranks(volt::bench::run_shell(command, "fsdp_memory"), ranks);
          times[strategy].push_back(numbers.step_ms);
          memory[strategy] = numbers;
        }
      }
      const double ddp_ms = median(times["ddp"]);
      // Issue 18's goal for FSDP: 1/N of DDP's model state + the largest unit + 5%.
      const double goal = (memory["ddp"].model() / static_cast<double>(ranks) + unit_bytes) * 1.05;
      for (const auto& strategy : strategies) {
        const auto& m = memory[strategy];
        const double ms = median(times[strategy]);
        const bool fsdp = strategy.rfind("fsdp", 0) == 0;
        std::printf("| %lld | %s | %.1f | %.1f | %.1f | %.1f | %.1f | %s | %.0f | %.1f | %.2fx |\n",
                    static_cast<long long>(ranks), strategy.c_str(), mib(m.params), mib(m.gathered), mib(m.grads),
                    mib(m.state), mib(m.model()),
                    fsdp ? (m.model() <= goal ? ("<= " + std::to_string(static_cast<int>(mib(goal)))).c_str()
                                              : ("> " + std::to_string(static_cast<int>(mib(goal)))).c_str())
                         : "",
                    mib(m.rss), ms, ms / ddp_ms);
      }
      std::fflush(stdout);
    }
  });
}

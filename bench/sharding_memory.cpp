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
#include <cstdio>

#include "bench/ranked_runs.h"
#include "distributed/network.h"
#include "strategies/ddp/ddp_strategy.h"
#include "strategies/sharded/sharded_ddp_strategy.h"
#include "trainer/run_main.h"

namespace {

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

// Counts what the table reports, on every rank; RankReporter prints it at the end of training.
class MemoryProbe : public volt::bench::RankReporter {
 public:
  using RankReporter::RankReporter;

  void on_before_optimizer_step(volt::Trainer&, volt::Module& module, torch::optim::Optimizer&) override {
    std::vector<torch::Tensor> grads;
    for (const auto& p : module.parameters()) grads.push_back(p.grad());
    grad_bytes_ = std::max(grad_bytes_, storage_bytes(grads));
  }

 protected:
  std::vector<std::pair<std::string, int64_t>> memory(volt::Trainer& trainer, volt::Module& module) override {
    return {{"params", storage_bytes(module.parameters())},
            {"grads", grad_bytes_},
            {"buffers", buffer_bytes(trainer.strategy())},
            {"state", adam_state_bytes(*trainer.optimizers().at(0))}};
  }

 private:
  static int64_t buffer_bytes(const volt::Strategy& strategy) {
    if (auto* ddp = dynamic_cast<const volt::DDPStrategy*>(&strategy)) {
      std::vector<torch::Tensor> buffers;
      for (size_t b = 0; b < ddp->reducer().num_buckets(); ++b) buffers.push_back(ddp->reducer().bucket(b).buffer());
      return storage_bytes(buffers);
    }
    if (auto* sharded = dynamic_cast<const volt::ShardedDDPStrategy*>(&strategy))
      return sharded->reducer().peak_buffer_bytes();
    return 0;
  }

  int64_t grad_bytes_ = 0;
};

void run_worker(volt::ProcessLauncher& launcher, const volt::bench::RankedFlags& flags) {
  volt::Trainer trainer(volt::bench::worker_trainer_options(flags, "/tmp/volt_sharding_memory"), launcher);
  trainer.add_callback(std::make_shared<MemoryProbe>(flags.warmup));
  torch::manual_seed(0);
  auto module = std::make_shared<Mlp>();
  const int64_t samples = flags.worker_ranks * kBatch * (flags.steps + flags.warmup);
  auto data = std::make_shared<volt::TensorDataset>(torch::randn({samples, kWidths.front()}),
                                                    torch::randn({samples, kWidths.back()}));
  volt::DataLoaderOptions loader;
  loader.batch_size = kBatch;
  trainer.fit(module, std::make_shared<volt::DataLoader>(data, loader));
}

}  // namespace

int main(int argc, char** argv) {
  return volt::run_main([&](volt::ProcessLauncher& launcher) {
    volt::bench::RankedFlags flags;  // defaults: 2 rounds, 12 steps, 3 warm-up, ranks 2,4
    if (!volt::bench::parse_ranked_flags(argc, argv, "sharding_memory", flags)) return;
    setenv("OMP_NUM_THREADS", "1", 1);
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    if (!flags.worker_strategy.empty()) {
      torch::set_num_threads(1);
      run_worker(launcher, flags);
      return;
    }
    const std::string program = volt::bench::self_path("sharding_memory");
    const std::string script = std::string(VOLT_SOURCE_DIR) + "/bench/sharding_memory_worker.py";
    const std::vector<std::string> strategies{"ddp", "ddp:shard_optimizer=true", "ddp_sharded", "torch ZeRO"};
    std::printf("Optimizer-state and gradient sharding, %lld-parameter MLP %s, Adam, batch %lld per rank, Gloo on\n"
                "127.0.0.1, 1 thread per rank, %d rounds interleaved, %d timed steps (+%d warm-up). MiB per rank\n"
                "(the largest rank) counted from live tensors; step time: median ms per step.\n\n",
                static_cast<long long>(parameter_count()), "912x13-10", static_cast<long long>(kBatch),
                flags.rounds, flags.steps, flags.warmup);
    std::printf(
        "| ranks | strategy                 | params | grads | buffers | Adam state | peak RSS | ms/step | vs ddp "
        "| vs torch ZeRO |\n|---|---|---|---|---|---|---|---|---|---|\n");
    for (const int64_t ranks : flags.world_sizes()) {
      std::vector<std::pair<std::string, std::string>> commands;
      for (const auto& strategy : strategies) {
        commands.emplace_back(
            strategy, strategy == "torch ZeRO"
                          ? std::string("GLIBC_TUNABLES=") + volt::bench::kTrainerMallocTunables +
                                " /usr/bin/python3 " + script + " " + std::to_string(ranks) + " " +
                                std::to_string(volt::find_free_port()) + " " + std::to_string(flags.steps) + " " +
                                std::to_string(flags.warmup)
                          : flags.worker_command(program, strategy, ranks));
      }
      const auto runs = volt::bench::run_interleaved(commands, flags.rounds, ranks, "sharding_memory");
      const double ddp_ms = runs.median_ms("ddp"), zero_ms = runs.median_ms("torch ZeRO");
      for (const auto& strategy : strategies) {
        const auto& m = runs.report.at(strategy);
        const double ms = runs.median_ms(strategy);
        std::printf("| %5lld | %-24s | %6.1f | %5.1f | %7.1f | %10.1f | %8.0f | %7.1f | %5.2fx | %12.2fx |\n",
                    static_cast<long long>(ranks), strategy.c_str(), mib(m.at("params")), mib(m.at("grads")),
                    mib(m.at("buffers")), mib(m.at("state")), mib(m.at("rss")), ms, ms / ddp_ms, ms / zero_ms);
      }
      std::fflush(stdout);
    }
  });
}

// The tensor_parallel strategy's step (Note [The tensor_parallel strategy]) against one process on
// the same batches, through volt's Trainer and launcher, ranks on one host, one compute thread
// each: an MLP of K blocks Linear(W, 4W), ReLU, Linear(4W, W) (a transformer's MLP) with every
// block's first linear split column-wise and its second row-wise, batch B, SGD. Columns: the
// bytes each rank's collectives carried in the last step (the strategy's counters) against the
// formula, one all-reduce of a B x W activation per block forward and one per block backward but
// the first (whose input needs no gradient): (2K - 1) B W 4 bytes; parameters per rank (live
// tensors); the median ms per step.
//
//   build/bench/tensor_parallel_step [--rounds 2] [--steps 6] [--warmup 2] [--ranks 2]
#include <cstdio>

#include "bench/model_state_probe.h"
#include "trainer/run_main.h"

namespace {

constexpr int64_t kWidth = 512, kBlocks = 4, kBatch = 64;

class BlockStack : public volt::Module {
 public:
  BlockStack() {
    for (int64_t i = 0; i < kBlocks; ++i) {
      net->push_back(torch::nn::Linear(kWidth, 4 * kWidth));
      net->push_back(torch::nn::ReLU());
      net->push_back(torch::nn::Linear(4 * kWidth, kWidth));
    }
    register_module("net", net);
  }
  torch::Tensor training_step(const volt::Batch& batch, int64_t) override {
    return torch::mse_loss(net->forward(batch.input), batch.target);
  }
  volt::OptimizerConfig configure_optimizers() override {
    return volt::OptimizerConfig(std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(1e-3)));
  }
  torch::nn::Sequential net;
};

// "net.0:colwise|net.2:rowwise|net.3:colwise|...": each block's pair.
std::string plan() {
  std::string text;
  for (int64_t i = 0; i < kBlocks; ++i) {
    text += (i ? "|" : "") + std::string("net.") + std::to_string(3 * i) + ":colwise|net." + std::to_string(3 * i + 2) +
            ":rowwise";
  }
  return text;
}

class CommProbe : public volt::bench::RankReporter {
 public:
  using RankReporter::RankReporter;

 protected:
  std::vector<std::pair<std::string, int64_t>> memory(volt::Trainer& trainer, volt::Module& module) override {
    const auto metrics = trainer.strategy().metrics();
    const auto found = metrics.find("comm/step_bytes");
    int64_t params = 0;
    for (const auto& p : module.parameters()) params += p.numel() * static_cast<int64_t>(p.element_size());
    return {{"step_bytes", found == metrics.end() ? 0 : static_cast<int64_t>(found->second)}, {"params", params}};
  }
};

void run_worker(volt::ProcessLauncher& launcher, const volt::bench::RankedFlags& flags) {
  auto options = volt::bench::worker_trainer_options(flags, "/tmp/volt_tensor_parallel_step");
  options.threads = 1;
  volt::Trainer trainer(options, launcher);
  trainer.add_callback(std::make_shared<CommProbe>(flags.warmup));
  torch::manual_seed(0);
  const int64_t samples = kBatch * (flags.steps + flags.warmup);
  auto data = std::make_shared<volt::TensorDataset>(torch::randn({samples, kWidth}), torch::randn({samples, kWidth}));
  volt::DataLoaderOptions loader;
  loader.batch_size = kBatch;  // every rank of the group takes the same batch
  trainer.fit(std::make_shared<BlockStack>(), std::make_shared<volt::DataLoader>(data, loader));
}

void compare_all(const volt::bench::RankedFlags& flags, const std::string& program) {
  std::printf(
      "tensor_parallel step, %d rounds interleaved, %d timed steps (+%d warm-up), %lld blocks Linear(%lld, "
      "%lld) + Linear(%lld, %lld), batch %lld, ranks on one host, 1 thread per rank, SGD.\n\n"
      "| strategy | ranks | bytes per step per rank | formula (2K-1)BW4 | params MiB per rank | ms/step | vs one "
      "process |\n|---|---|---|---|---|---|---|\n",
      flags.rounds, flags.steps, flags.warmup, static_cast<long long>(kBlocks), static_cast<long long>(kWidth),
      static_cast<long long>(4 * kWidth), static_cast<long long>(4 * kWidth), static_cast<long long>(kWidth),
      static_cast<long long>(kBatch));
  const auto one = volt::bench::run_interleaved({{"single_device", flags.worker_command(program, "single_device", 1)}},
                                                flags.rounds, 1, "tensor_parallel_step");
  const double one_ms = one.median_ms("single_device");
  std::printf("| `single_device` | 1 | 0 | 0 | %.2f | %.1f | 1.00x |\n",
              volt::bench::mib(one.report.at("single_device").at("params")), one_ms);
  const double formula = static_cast<double>((2 * kBlocks - 1) * kBatch * kWidth * 4);
  for (const int64_t ranks : flags.world_sizes()) {
    const std::string strategy = "tensor_parallel:plan=" + plan();
    const auto runs = volt::bench::run_interleaved({{strategy, flags.worker_command(program, strategy, ranks)}},
                                                   flags.rounds, ranks, "tensor_parallel_step");
    const auto& m = runs.report.at(strategy);
    std::printf("| `tensor_parallel` | %lld | %.0f | %.0f | %.2f | %.1f | %.2fx |\n", static_cast<long long>(ranks),
                m.at("step_bytes"), formula, volt::bench::mib(m.at("params")), runs.median_ms(strategy),
                runs.median_ms(strategy) / one_ms);
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  volt::bench::RankedFlags defaults;
  defaults.steps = 6;
  defaults.warmup = 2;
  defaults.ranks = "2";
  return volt::bench::ranked_benchmark_main(argc, argv, "tensor_parallel_step", defaults, run_worker, compare_all);
}

// fsdp's two shard layouts (Note [Per-parameter layout]), through volt's Trainer and launcher,
// ranks on one host (their collectives through shared memory, the Trainer's default), one compute
// thread per rank, Adam, counted per rank from live tensors and
// the strategy's counters (bench/model_state_probe.h; the largest rank shown):
//
//   1. The ~20M-parameter MLP of fsdp_memory (8 blocks, Linear 1580x1580, one unit each by
//      min_num_params=1e6), every parameter trained: layout=per_parameter against layout=flat.
//   2. A LoRA-style model: 64 blocks relu(W x + b + B A x), W [384, 384] and b frozen, A [4, 384]
//      and B [384, 4] trained (98% of the parameters frozen), each block a unit (wrap=LoraBlock),
//      4 ranks: the flat layout keeps the frozen parameters whole on every rank, per_parameter
//      shards them.
//   3. The same with its frozen base in bfloat16 beside float32 adapters (LoRA's usual dtypes):
//      per_parameter then shards units of two dtypes (a block of bytes, one all-gather).
//
// Columns: params (the module's and the optimizer's storages: shards, and frozen parameters
// wherever they are), gathered (the most gathered at once during a step: the unit, and per
// parameter the all-gathered blocks it is copied out of), grads (alive before the optimizer
// step), Adam state, model state (their sum), its ratio to the flat layout's, peak RSS, median
// ms per step and its ratio.
//
//   build/bench/fsdp_layouts [--rounds 2] [--steps 8] [--warmup 2] [--ranks 2,4]
#include <cstdio>

#include "bench/block_mlp.h"
#include "bench/model_state_probe.h"
#include "nn/module_call.h"
#include "trainer/run_main.h"

namespace {

using volt::bench::MemoryProbe;
using volt::bench::mib;
using volt::bench::model_state;

constexpr int64_t kBatch = 16, kLoraWidth = 384, kLoraRank = 4, kLoraBlocks = 64, kLoraRanks = 4;

// relu(W x + b + B A x): W and b frozen (the pretrained weight, in `base_dtype`), A and B the
// adapter (float32; B starts at zero, LoRA's initialization).
class LoraBlockImpl : public torch::nn::Module {
 public:
  explicit LoraBlockImpl(torch::Dtype base_dtype = torch::kFloat)
      : base(register_module("base", torch::nn::Linear(kLoraWidth, kLoraWidth))),
        down(register_module("down", torch::nn::Linear(torch::nn::LinearOptions(kLoraWidth, kLoraRank).bias(false)))),
        up(register_module("up", torch::nn::Linear(torch::nn::LinearOptions(kLoraRank, kLoraWidth).bias(false)))) {
    base->to(base_dtype);
    base->weight.set_requires_grad(false);
    base->bias.set_requires_grad(false);
    torch::NoGradGuard no_grad;
    up->weight.zero_();
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const auto frozen = base->forward(x.to(base->weight.scalar_type())).to(x.scalar_type());
    return torch::relu(frozen + up->forward(down->forward(x)));
  }

  torch::nn::Linear base, down, up;
};
TORCH_MODULE(LoraBlock);

class LoraModel : public volt::Module {
 public:
  explicit LoraModel(torch::Dtype base_dtype) {
    for (int64_t i = 0; i < kLoraBlocks; ++i) net->push_back(LoraBlock(base_dtype));
    register_module("net", net);
  }
  torch::Tensor training_step(const volt::Batch& batch, int64_t) override {
    return torch::mse_loss(net->forward(batch.input), batch.target);
  }
  volt::OptimizerConfig configure_optimizers() override {
    std::vector<torch::Tensor> trained;
    for (const auto& p : parameters()) {
      if (p.requires_grad()) trained.push_back(p);
    }
    return volt::OptimizerConfig(std::make_shared<torch::optim::Adam>(trained, torch::optim::AdamOptions(1e-4)));
  }
  torch::nn::Sequential net;
};

// A worker's "strategy" is "<model>|<strategy>": the benchmark's two models share the launcher.
void run_worker(volt::ProcessLauncher& launcher, volt::bench::RankedFlags flags) {
  const auto bar = flags.worker_strategy.find('|');
  const std::string model = flags.worker_strategy.substr(0, bar);
  flags.worker_strategy = flags.worker_strategy.substr(bar + 1);
  auto options = volt::bench::worker_trainer_options(flags, "/tmp/volt_fsdp_layouts");
  options.threads = 1;
  volt::Trainer trainer(options, launcher);
  trainer.add_callback(std::make_shared<MemoryProbe>(flags.warmup));
  torch::manual_seed(0);
  std::shared_ptr<volt::Module> module;
  int64_t width = 0;
  if (model == "lora" || model == "lora_bf16") {
    module = std::make_shared<LoraModel>(model == "lora" ? torch::kFloat : torch::kBFloat16);
    width = kLoraWidth;
  } else {
    module = std::make_shared<volt::bench::BlockMlp>();
    width = volt::bench::kBlockWidth;
  }
  const int64_t samples = flags.worker_ranks * kBatch * (flags.steps + flags.warmup);
  auto data = std::make_shared<volt::TensorDataset>(torch::randn({samples, width}), torch::randn({samples, width}));
  volt::DataLoaderOptions loader;
  loader.batch_size = kBatch;
  trainer.fit(module, std::make_shared<volt::DataLoader>(data, loader));
}

// Runs `strategies` (the first the reference) of `model` on `ranks`, interleaved, and prints the
// table's rows.
void compare(const volt::bench::RankedFlags& flags, const std::string& program, const std::string& model,
             const std::vector<std::string>& strategies, int64_t ranks) {
  std::vector<std::pair<std::string, std::string>> commands;
  for (const auto& strategy : strategies)
    commands.emplace_back(strategy, flags.worker_command(program, model + "|" + strategy, ranks));
  const auto runs = volt::bench::run_interleaved(commands, flags.rounds, ranks, "fsdp_layouts");
  const auto& reference = runs.report.at(strategies.front());
  const double reference_ms = runs.median_ms(strategies.front());
  for (const auto& strategy : strategies) {
    const auto& m = runs.report.at(strategy);
    const double ms = runs.median_ms(strategy);
    std::printf("| %lld | %s | %.2f | %.2f | %.3f | %.3f | %.2f | %.2fx | %.0f | %.1f | %.2fx |\n",
                static_cast<long long>(ranks), strategy.c_str(), mib(m.at("params")), mib(m.at("gathered")),
                mib(m.at("grads")), mib(m.at("state")), mib(model_state(m)), model_state(m) / model_state(reference),
                mib(m.at("rss")), ms, ms / reference_ms);
  }
  std::fflush(stdout);
}

// The parent: runs the workers and prints the tables.
void compare_all(const volt::bench::RankedFlags& flags, const std::string& program) {
  const char* header =
      "| ranks | strategy | params | gathered | grads | Adam state | model state | vs flat | peak RSS | ms/step "
      "| vs flat |\n|---|---|---|---|---|---|---|---|---|---|---|\n";
  std::printf("fsdp layouts, %d rounds interleaved, %d timed steps (+%d warm-up), batch %lld per rank, ranks on "
              "one host, 1 thread per rank. MiB per rank (the largest rank), from live tensors.\n\n"
              "1. The 20.0M-parameter MLP of 8 blocks (Linear 1580x1580, one unit each), every parameter "
              "trained\n\n%s",
              flags.rounds, flags.steps, flags.warmup, static_cast<long long>(kBatch), header);
  for (const int64_t ranks : flags.world_sizes()) {
    compare(flags, program, "mlp", {"fsdp:min_num_params=1e6", "fsdp:min_num_params=1e6,layout=per_parameter"},
            ranks);
  }
  const int64_t frozen = kLoraBlocks * (kLoraWidth * kLoraWidth + kLoraWidth);
  const int64_t trained = kLoraBlocks * 2 * kLoraWidth * kLoraRank;
  std::printf("\n2. LoRA-style: %lld blocks, %lld frozen and %lld trained parameters (%.1f%% frozen), %lld ranks; "
              "goal per_parameter: params %.2f MiB (all / %lld, + padding), grads %.3f MiB (trained / %lld), model "
              "state <= 0.3x flat\n\n%s",
              static_cast<long long>(kLoraBlocks), static_cast<long long>(frozen), static_cast<long long>(trained),
              100.0 * static_cast<double>(frozen) / static_cast<double>(frozen + trained),
              static_cast<long long>(kLoraRanks), mib(static_cast<double>(frozen + trained) * 4 / kLoraRanks),
              static_cast<long long>(kLoraRanks), mib(static_cast<double>(trained) * 4 / kLoraRanks),
              static_cast<long long>(kLoraRanks), header);
  compare(flags, program, "lora", {"fsdp:wrap=LoraBlock", "fsdp:wrap=LoraBlock,layout=per_parameter"}, kLoraRanks);
  std::printf("\n3. LoRA-style, its frozen base in bfloat16 (units of two dtypes per parameter); goal per_parameter: "
              "params %.2f MiB (frozen x 2 bytes + trained x 4, / %lld)\n\n%s",
              mib((static_cast<double>(frozen) * 2 + static_cast<double>(trained) * 4) / kLoraRanks),
              static_cast<long long>(kLoraRanks), header);
  compare(flags, program, "lora_bf16", {"fsdp:wrap=LoraBlock", "fsdp:wrap=LoraBlock,layout=per_parameter"},
          kLoraRanks);
}

}  // namespace

int main(int argc, char** argv) {
  volt::bench::RankedFlags defaults;
  defaults.steps = 8;
  defaults.warmup = 2;
  return volt::bench::ranked_benchmark_main(argc, argv, "fsdp_layouts", defaults, run_worker, compare_all);
}

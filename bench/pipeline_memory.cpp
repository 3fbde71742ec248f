// What a rank holds under `--strategy pipeline` (Note [The pipeline strategy]) against ddp and
// fsdp on the same model, through volt's Trainer and launcher, 4 ranks on one host, one compute
// thread each, Adam, counted per rank from live tensors (bench/model_state_probe.h; the largest
// rank shown). The model is the ~20M-parameter MLP of 8 Linear 1580x1580 blocks
// (bench/block_mlp.h): 4 stages of 2 blocks under the pipeline, or 2 stages of 4 blocks in 2
// replicas, each stage whole on its replicas or sharded over them (data_parallel=fsdp); one fsdp
// unit per block. Every strategy takes the same 64 samples a step: ddp and fsdp 16 per rank, a
// pipeline's replica 16 per stage as 4 micro-batches.
//
// Columns: params (the module's and the optimizer's storages: a stage's, a shard, or the whole
// model), grads (alive before the optimizer step), Adam state, params + state and its ratio to
// ddp's (the goal: <= 0.3x for 4 stages), model state (with the gradients and fsdp's gathered
// units), peak RSS, median ms per step.
//
//   build/bench/pipeline_memory [--rounds 2] [--steps 6] [--warmup 2]
#include <cstdio>

#include "bench/block_mlp.h"
#include "bench/model_state_probe.h"
#include "strategies/strategy_registry.h"
#include "trainer/run_main.h"

namespace {

using volt::bench::mib;
using volt::bench::model_state;

constexpr int64_t kRanks = 4, kRowsPerRank = 16;

void run_worker(volt::ProcessLauncher& launcher, const volt::bench::RankedFlags& flags) {
  auto options = volt::bench::worker_trainer_options(flags, "/tmp/volt_pipeline_memory");
  options.threads = 1;
  volt::Trainer trainer(options, launcher);
  trainer.add_callback(std::make_shared<volt::bench::MemoryProbe>(flags.warmup));
  torch::manual_seed(0);
  auto module = std::make_shared<volt::bench::BlockMlp>();
  // The same samples per step: a pipeline's replica takes all its stages' rows.
  const auto strategy = volt::parse_strategy_spec(flags.worker_strategy);
  const int64_t stages = strategy.name == "pipeline" ? std::stoll(strategy.values.at("stages")) : 1;
  const int64_t batch = kRowsPerRank * stages;
  const int64_t samples = kRanks * kRowsPerRank * (flags.steps + flags.warmup);
  auto data = std::make_shared<volt::TensorDataset>(torch::randn({samples, volt::bench::kBlockWidth}),
                                                    torch::randn({samples, volt::bench::kBlockWidth}));
  volt::DataLoaderOptions loader;
  loader.batch_size = batch;
  trainer.fit(module, std::make_shared<volt::DataLoader>(data, loader));
}

void compare_all(const volt::bench::RankedFlags& flags, const std::string& program) {
  const std::vector<std::string> strategies = {"ddp", "fsdp:min_num_params=1e6",
                                               "pipeline:stages=4,microbatches=4,schedule=1f1b",
                                               "pipeline:stages=2,microbatches=4,schedule=1f1b",
                                               "pipeline:stages=2,microbatches=4,schedule=1f1b,data_parallel=fsdp"};
  std::vector<std::pair<std::string, std::string>> commands;
  for (const auto& strategy : strategies)
    commands.emplace_back(strategy, flags.worker_command(program, strategy, kRanks));
  const auto runs = volt::bench::run_interleaved(commands, flags.rounds, kRanks, "pipeline_memory");
  std::printf(
      "pipeline memory, %d rounds interleaved, %d timed steps (+%d warm-up), %lld ranks on one host, 1 "
      "thread per rank, Adam, 64 samples a step. MiB per rank (the largest rank), from live tensors.\n\n"
      "| strategy | params | grads | Adam state | params + state | vs ddp | model state | peak RSS | ms/step "
      "|\n|---|---|---|---|---|---|---|---|---|\n",
      flags.rounds, flags.steps, flags.warmup, static_cast<long long>(kRanks));
  const auto& ddp = runs.report.at("ddp");
  const double ddp_kept = ddp.at("params") + ddp.at("state");
  for (const auto& strategy : strategies) {
    const auto& m = runs.report.at(strategy);
    const double kept = m.at("params") + m.at("state");
    std::printf("| `%s` | %.2f | %.2f | %.2f | %.2f | %.2fx | %.2f | %.0f | %.1f |\n", strategy.c_str(),
                mib(m.at("params")), mib(m.at("grads")), mib(m.at("state")), mib(kept), kept / ddp_kept,
                mib(model_state(m)), mib(m.at("rss")), runs.median_ms(strategy));
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  volt::bench::RankedFlags defaults;
  defaults.steps = 6;
  defaults.warmup = 2;
  defaults.ranks = std::to_string(kRanks);
  return volt::bench::ranked_benchmark_main(argc, argv, "pipeline_memory", defaults, run_worker, compare_all);
}

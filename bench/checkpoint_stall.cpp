// How long a checkpoint holds up training: the Trainer fits a ~100M-parameter MLP (Adam, so a
// checkpoint is ~1.2 GB: weights, two moments, the step) and ModelCheckpoint saves every
// --every steps, synchronously or in the background (async=true, Note [Checkpoints written in the
// background]), against the same fit without checkpoints, in one run, interleaved, --rounds times.
// The stall per checkpoint is the extra wall time of the steps (the time from one step's end to
// the next, save and background contention included) over the run without checkpoints, divided
// by the number of checkpoints between steps; medians over the rounds. The last save of the background runs is
// finished by the end of fit, which is timed too (the fit's wall time column).
// Two tables: training on every core (volt's default), then on all but one, which leaves the
// writer a core of its own (--threads N: one table, N threads).
//   build/bench/checkpoint_stall [--width 4096] [--layers 6] [--steps 12] [--every 4] [--rounds 3]
//                                [--threads N] [--dir DIR]
#include <boost/program_options.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <thread>
#include <vector>

#include "bench/bench_support.h"
#include "callbacks/model_checkpoint.h"
#include "trainer/volt.h"

namespace fs = std::filesystem;
namespace po = boost::program_options;
using Clock = std::chrono::steady_clock;

namespace {

class WideMlp : public volt::Module {
 public:
  WideMlp(int64_t width, int64_t layers) {
    for (int64_t i = 0; i < layers; ++i) {
      body_->push_back(torch::nn::Linear(width, width));
      body_->push_back(torch::nn::ReLU());
    }
    body_->push_back(torch::nn::Linear(width, 1));
    register_module("body", body_);
  }
  torch::Tensor training_step(const volt::Batch& batch, int64_t) override {
    return torch::mse_loss(body_->forward(batch.input), batch.target);
  }
  volt::OptimizerConfig configure_optimizers() override {
    return volt::OptimizerConfig(std::make_shared<torch::optim::Adam>(parameters(), torch::optim::AdamOptions(1e-5)));
  }

 private:
  torch::nn::Sequential body_;
};

// The wall time between consecutive step ends.
struct StepTimes : volt::Callback {
  void on_train_batch_end(volt::Trainer&, volt::Module&, const torch::Tensor&, const volt::Batch&, int64_t) override {
    const auto now = Clock::now();
    if (last) seconds.push_back(std::chrono::duration<double>(now - *last).count());
    last = now;
  }
  std::optional<Clock::time_point> last;
  std::vector<double> seconds;
};

struct Result {
  double steps_seconds = 0;  // sum of the timed step intervals
  double fit_seconds = 0;
};

enum class Mode { None, Sync, Async };

Result fit_once(Mode mode, int64_t width, int64_t layers, int64_t steps, int64_t every, int64_t threads,
                const fs::path& dir) {
  volt::TrainerOptions options;
  options.threads = threads;
  options.default_root_dir = dir.string();
  options.loggers.clear();
  options.enable_checkpointing = false;
  options.enable_progress_bar = false;
  options.enable_model_summary = false;
  options.num_sanity_val_steps = 0;
  options.max_steps = steps;
  torch::manual_seed(0);
  auto model = std::make_shared<WideMlp>(width, layers);
  const int64_t batch = 16;
  auto data = std::make_shared<volt::DataLoader>(
      std::make_shared<volt::TensorDataset>(torch::randn({batch * steps, width}), torch::randn({batch * steps, 1})),
      volt::DataLoaderOptions{.batch_size = batch});
  volt::Trainer trainer(options);
  auto times = std::make_shared<StepTimes>();
  trainer.add_callback(times);  // before ModelCheckpoint: a step's save falls into the next interval
  std::shared_ptr<volt::ModelCheckpoint> checkpoint;
  if (mode != Mode::None) {
    volt::ModelCheckpointOptions checkpoint_options;
    checkpoint_options.dirpath = (dir / "checkpoints").string();
    checkpoint_options.every_n_train_steps = every;
    checkpoint_options.save_top_k = 1;
    checkpoint_options.async_write = mode == Mode::Async;
    checkpoint = std::make_shared<volt::ModelCheckpoint>(checkpoint_options);
    trainer.add_callback(checkpoint);
  }
  const auto start = Clock::now();
  trainer.fit(model, data);
  Result result;
  result.fit_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  for (const double s : times->seconds) result.steps_seconds += s;
  fs::remove_all(dir / "checkpoints");
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t width = 4096, layers = 6, steps = 12, every = 4, rounds = 3, threads = 0;
  std::string dir = "/tmp/volt_checkpoint_stall";
  po::options_description flags("checkpoint_stall");
  flags.add_options()("width", po::value(&width), "hidden width")("layers", po::value(&layers), "hidden layers")(
      "steps", po::value(&steps), "optimizer steps per fit")("every", po::value(&every), "steps between checkpoints")(
      "rounds", po::value(&rounds), "interleaved rounds")("dir", po::value(&dir), "where checkpoints are written")(
      "threads", po::value(&threads), "training's intra-op threads (0: volt's rule, the cores)");
  if (!volt::bench::parse_flags(argc, argv, flags)) return 0;
  const double parameters = static_cast<double>(layers * (width * width + width) + width + 1);
  std::printf("checkpoint_stall: MLP %lld x %lld (%.1fM parameters, Adam: a checkpoint of ~%.2f GB), %lld steps of "
              "batch 16, a checkpoint every %lld steps, %lld rounds, files in %s\n",
              static_cast<long long>(layers), static_cast<long long>(width), parameters / 1e6,
              parameters * 12 / 1e9, static_cast<long long>(steps), static_cast<long long>(every),
              static_cast<long long>(rounds), dir.c_str());
  // Training on every core, then on all but one: a writer in the background needs a core of its
  // own, or its serialization, checksum and copies come out of the training's CPU time.
  const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  std::vector<int64_t> settings = {threads > 0 ? threads : cores};
  if (threads == 0 && cores > 1) settings.push_back(cores - 1);
  for (const int64_t training_threads : settings) {
    std::map<Mode, std::vector<double>> steps_seconds, fit_seconds;
    for (int64_t round = 0; round < rounds; ++round) {
      for (const Mode mode : {Mode::None, Mode::Sync, Mode::Async}) {
        const auto result = fit_once(mode, width, layers, steps, every, training_threads, dir);
        steps_seconds[mode].push_back(result.steps_seconds);
        fit_seconds[mode].push_back(result.fit_seconds);
      }
    }
    // The saves that fall between two steps (a save after the last step is in the fit's time only).
    const double checkpoints = static_cast<double>((steps - 1) / every);
    const double base = volt::bench::median(steps_seconds[Mode::None]);
    const double sync_stall = (volt::bench::median(steps_seconds[Mode::Sync]) - base) / checkpoints;
    const double async_stall = (volt::bench::median(steps_seconds[Mode::Async]) - base) / checkpoints;
    std::printf("\ntraining on %lld intra-op thread(s) of %lld cores\n", static_cast<long long>(training_threads),
                static_cast<long long>(cores));
    std::printf(
        "| checkpoints | steps' wall time (s) | stall per checkpoint (s) | stall / sync's | fit wall time (s) |\n");
    std::printf("|---|---|---|---|---|\n");
    std::printf("| none | %.2f | - | - | %.2f |\n", base, volt::bench::median(fit_seconds[Mode::None]));
    std::printf("| synchronous | %.2f | %.2f | 1.00 | %.2f |\n", volt::bench::median(steps_seconds[Mode::Sync]),
                sync_stall, volt::bench::median(fit_seconds[Mode::Sync]));
    std::printf("| async=true | %.2f | %.2f | %.2f | %.2f |\n", volt::bench::median(steps_seconds[Mode::Async]),
                async_stall, async_stall / sync_stall, volt::bench::median(fit_seconds[Mode::Async]));
  }
  return 0;
}

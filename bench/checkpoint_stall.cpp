// How long a checkpoint holds up training: the Trainer fits a wide MLP (Adam, so a checkpoint
// holds the weights, two moments and the step: ~12 bytes a parameter) and ModelCheckpoint saves
// every --every steps, synchronously or in the background (async=true, Note [Checkpoints written
// in the background]), against the same fit without checkpoints, in one run, interleaved,
// --rounds times. The stall per checkpoint is the extra wall time of the steps (the time from one
// step's end to the next, save and background contention included) over the run without
// checkpoints, divided by the number of checkpoints between steps; medians over the rounds. The
// save's own time is also measured where it happens (the host time of ModelCheckpoint's save at
// a step's end: the first save apart, which allocates the host buffers kept for the next ones).
// "During the write" is the mean interval of the steps that ended while a background write was in
// flight (its file not yet in place), against the run without checkpoints. The last save of the
// background runs is finished by the end of fit, which is timed too (the fit's wall time column).
// On the CPU, two tables: training on every core (volt's default), then on all but one, which
// leaves the writer a core of its own (--threads N: one table, N threads). --device cuda trains
// on cuda:0 (Note [Snapshots of device memory]): --width 8192 --layers 16 is a 1.07B-parameter
// model, a 12.9 GB checkpoint.
//   build/bench/checkpoint_stall [--width 4096] [--layers 6] [--steps 12] [--every 4] [--rounds 3]
//                                [--batch 16] [--threads N] [--dir DIR] [--device cpu|cuda]
//                                [--precision 32-true]
#include <boost/program_options.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
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

// ModelCheckpoint timing its saves: the host time of each on_train_batch_end that saved (the
// Trainer runs checkpoint callbacks after the others, so a callback of its own cannot bracket it).
class TimedCheckpoint : public volt::ModelCheckpoint {
 public:
  using volt::ModelCheckpoint::ModelCheckpoint;
  void on_train_batch_end(volt::Trainer& trainer, volt::Module& module, const torch::Tensor& outputs,
                          const volt::Batch& batch, int64_t batch_idx) override {
    const auto before = best_model_path();
    const auto start = Clock::now();
    volt::ModelCheckpoint::on_train_batch_end(trainer, module, outputs, batch, batch_idx);
    if (best_model_path() != before) seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::vector<double> seconds;
};

// The wall time between consecutive step ends, and whether a background write was in flight at
// each step's end (the newest checkpoint's file not yet in place). Added before ModelCheckpoint,
// so that a step's save falls into the next interval; TimedCheckpoint times the save itself.
struct StepTimes : volt::Callback {
  void on_train_batch_end(volt::Trainer&, volt::Module&, const torch::Tensor&, const volt::Batch&, int64_t) override {
    const auto now = Clock::now();
    if (last) {
      seconds.push_back(std::chrono::duration<double>(now - *last).count());
      in_flight.push_back(checkpoint && !checkpoint->best_model_path().empty() &&
                          !fs::exists(checkpoint->best_model_path()));
    }
    last = now;
  }
  std::shared_ptr<TimedCheckpoint> checkpoint;
  std::optional<Clock::time_point> last;
  std::vector<double> seconds;
  std::vector<bool> in_flight;
};

struct Result {
  double steps_seconds = 0;  // sum of the timed step intervals
  double fit_seconds = 0;
  std::vector<double> save_seconds;  // each save's host time, in order
  double during_write = 0;           // mean interval of the steps that ended during a background write
  int64_t steps_during_write = 0;
  double mean_step = 0;  // mean interval of all timed steps
};

struct Setup {
  int64_t width, layers, steps, every, threads, batch;
  std::string device, precision;
  fs::path dir;
};

enum class Mode { None, Sync, Async };

Result fit_once(Mode mode, const Setup& setup) {
  volt::TrainerOptions options;
  options.threads = setup.threads;
  options.accelerator = setup.device;
  options.precision = setup.precision;
  options.default_root_dir = setup.dir.string();
  options.loggers.clear();
  options.enable_checkpointing = false;
  options.enable_progress_bar = false;
  options.enable_model_summary = false;
  options.num_sanity_val_steps = 0;
  options.max_steps = setup.steps;
  options.max_epochs = -1;  // --steps decides
  torch::manual_seed(0);
  auto model = std::make_shared<WideMlp>(setup.width, setup.layers);
  // At most 4 batches, as many epochs as the steps need: a large batch of a wide model would
  // otherwise take the host's memory.
  const int64_t samples = setup.batch * std::min<int64_t>(setup.steps, 4);
  auto data = std::make_shared<volt::DataLoader>(
      std::make_shared<volt::TensorDataset>(torch::randn({samples, setup.width}), torch::randn({samples, 1})),
      volt::DataLoaderOptions{.batch_size = setup.batch});
  volt::Trainer trainer(options);
  auto times = std::make_shared<StepTimes>();
  trainer.add_callback(times);  // before ModelCheckpoint: a step's save falls into the next interval
  if (mode != Mode::None) {
    volt::ModelCheckpointOptions checkpoint_options;
    checkpoint_options.dirpath = (setup.dir / "checkpoints").string();
    checkpoint_options.every_n_train_steps = setup.every;
    checkpoint_options.save_top_k = 1;
    checkpoint_options.async_write = mode == Mode::Async;
    times->checkpoint = std::make_shared<TimedCheckpoint>(checkpoint_options);
    trainer.add_callback(times->checkpoint);
  }
  const auto start = Clock::now();
  trainer.fit(model, data);
  Result result;
  result.fit_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  for (size_t i = 0; i < times->seconds.size(); ++i) {
    result.steps_seconds += times->seconds[i];
    if (times->in_flight[i]) {
      result.during_write += times->seconds[i];
      ++result.steps_during_write;
    }
  }
  if (result.steps_during_write > 0) result.during_write /= static_cast<double>(result.steps_during_write);
  if (!times->seconds.empty()) result.mean_step = result.steps_seconds / static_cast<double>(times->seconds.size());
  if (times->checkpoint) result.save_seconds = times->checkpoint->seconds;
  // Each fit's figures as it ends: a run stopped by a time limit still leaves those it finished.
  std::fprintf(stderr, "fit (%s): steps' wall time %.2f s, %lld steps during a write, saves' host time:",
               mode == Mode::None   ? "none"
               : mode == Mode::Sync ? "synchronous"
                                    : "async",
               result.steps_seconds, static_cast<long long>(result.steps_during_write));
  for (const double save : result.save_seconds) std::fprintf(stderr, " %.3f s", save);
  std::fprintf(stderr, ", fit %.2f s\n", result.fit_seconds);
  fs::remove_all(setup.dir / "checkpoints");
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t width = 4096, layers = 6, steps = 12, every = 4, rounds = 3, threads = 0, batch = 16;
  std::string dir = "/tmp/volt_checkpoint_stall", device = "cpu", precision = "32-true";
  po::options_description flags("checkpoint_stall");
  flags.add_options()("width", po::value(&width), "hidden width")("layers", po::value(&layers), "hidden layers")(
      "steps", po::value(&steps), "optimizer steps per fit")("every", po::value(&every), "steps between checkpoints")(
      "rounds", po::value(&rounds), "interleaved rounds")("dir", po::value(&dir), "where checkpoints are written")(
      "threads", po::value(&threads), "training's intra-op threads (0: volt's rule, the cores)")(
      "batch", po::value(&batch), "batch size")("device", po::value(&device), "cpu | cuda (cuda:0)")(
      "precision", po::value(&precision), "the Trainer's precision");
  if (!volt::bench::parse_flags(argc, argv, flags)) return 0;
  const double parameters = static_cast<double>(layers * (width * width + width) + width + 1);
  std::printf(
      "checkpoint_stall: MLP %lld x %lld (%.1fM parameters, Adam: a checkpoint of ~%.2f GB) on %s in %s, "
      "%lld steps of batch %lld, a checkpoint every %lld steps, %lld rounds, files in %s\n",
      static_cast<long long>(layers), static_cast<long long>(width), parameters / 1e6, parameters * 12 / 1e9,
      device.c_str(), precision.c_str(), static_cast<long long>(steps), static_cast<long long>(batch),
      static_cast<long long>(every), static_cast<long long>(rounds), dir.c_str());
  // Training on every core, then on all but one: a writer in the background needs a core of its
  // own, or its serialization, checksum and copies come out of the training's CPU time. On CUDA
  // the device trains: one table.
  const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  std::vector<int64_t> settings = {threads > 0 ? threads : cores};
  if (threads == 0 && cores > 1 && device == "cpu") settings.push_back(cores - 1);
  for (const int64_t training_threads : settings) {
    const Setup setup{width, layers, steps, every, training_threads, batch, device, precision, dir};
    std::map<Mode, std::vector<Result>> results;
    for (int64_t round = 0; round < rounds; ++round) {
      for (const Mode mode : {Mode::None, Mode::Sync, Mode::Async}) results[mode].push_back(fit_once(mode, setup));
    }
    const auto median_of = [&](Mode mode, const std::function<double(const Result&)>& field) {
      std::vector<double> values;
      for (const auto& result : results[mode]) values.push_back(field(result));
      return volt::bench::median(values);
    };
    // A save's host time: the first save apart (it allocates the host buffers), then the others.
    const auto save = [&](Mode mode, bool first) {
      return median_of(mode, [first](const Result& r) {
        if (r.save_seconds.empty()) return 0.0;
        if (first) return r.save_seconds.front();
        if (r.save_seconds.size() == 1) return r.save_seconds.front();
        return volt::bench::median(std::vector<double>(r.save_seconds.begin() + 1, r.save_seconds.end()));
      });
    };
    const auto steps_seconds = [&](Mode mode) {
      return median_of(mode, [](const Result& r) { return r.steps_seconds; });
    };
    const auto fit_seconds = [&](Mode mode) { return median_of(mode, [](const Result& r) { return r.fit_seconds; }); };
    // The saves that fall between two steps (a save after the last step is in the fit's time only).
    const double checkpoints = static_cast<double>((steps - 1) / every);
    const double base = steps_seconds(Mode::None);
    const double sync_stall = (steps_seconds(Mode::Sync) - base) / checkpoints;
    const double async_stall = (steps_seconds(Mode::Async) - base) / checkpoints;
    if (device == "cpu") {
      std::printf("\ntraining on %lld intra-op thread(s) of %lld cores\n", static_cast<long long>(training_threads),
                  static_cast<long long>(cores));
    } else {
      std::printf("\ntraining on %s, %lld intra-op thread(s) of %lld cores\n", device.c_str(),
                  static_cast<long long>(training_threads), static_cast<long long>(cores));
    }
    std::printf(
        "| checkpoints | steps' wall time (s) | stall per checkpoint (s) | stall / sync's | first save (s) | "
        "later saves (s) | step during the write / without | fit wall time (s) |\n");
    std::printf("|---|---|---|---|---|---|---|---|\n");
    std::printf("| none | %.2f | - | - | - | - | - | %.2f |\n", base, fit_seconds(Mode::None));
    std::printf("| synchronous | %.2f | %.2f | 1.00 | %.3f | %.3f | - | %.2f |\n", steps_seconds(Mode::Sync),
                sync_stall, save(Mode::Sync, true), save(Mode::Sync, false), fit_seconds(Mode::Sync));
    const double during = median_of(Mode::Async, [](const Result& r) { return r.during_write; });
    const double plain = median_of(Mode::None, [](const Result& r) { return r.mean_step; });
    const double during_steps =
        median_of(Mode::Async, [](const Result& r) { return static_cast<double>(r.steps_during_write); });
    char during_text[64] = "no step ended during a write";
    if (during_steps > 0)
      std::snprintf(during_text, sizeof during_text, "%.3f (%.0f steps)", during / plain, during_steps);
    std::printf("| async=true | %.2f | %.2f | %.3f | %.3f | %.3f | %s | %.2f |\n", steps_seconds(Mode::Async),
                async_stall, async_stall / sync_stall, save(Mode::Async, true), save(Mode::Async, false), during_text,
                fit_seconds(Mode::Async));
    std::printf("\nlater saves' host time, async / sync: %.4f (1/%.0f)\n",
                save(Mode::Async, false) / save(Mode::Sync, false), save(Mode::Sync, false) / save(Mode::Async, false));
  }
  return 0;
}

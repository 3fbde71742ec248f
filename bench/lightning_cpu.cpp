// volt against PyTorch Lightning on the CPU, whole runs (docs/benchmarks.md, "volt against PyTorch
// Lightning on the CPU"): one epoch of Fashion-MNIST's training set, in memory on both sides, through
// volt's Trainer (this program re-executed with --worker) and through Lightning's Trainer
// (bench/lightning_cpu_worker.py), on one process and with DDP on two, barebones and at each
// Trainer's defaults, for the main job's CNN and a 784-128-10 MLP. Both sides start from the same
// weights (bench/step_models.h's step_models_init; the program compares the sums and prints no table
// when they differ), train with AdamW (lr 1e-4, weight decay 0.01), batch 128 per process, shuffled,
// and compute with the same intra-op threads per process (what volt's Trainer picks: cores /
// processes; the worker is told the same count).
//
// Per run it measures rank 0's median step (end of one training step to the end of the next, so
// the loader's batch, the hooks, the logging and the progress bar are in it) over the epoch after
// the warm-up steps, the wall time of the whole command from its start to its exit (interpreter or
// LibTorch start-up, data loading, starting the second process, checkpointing at the end), and the
// last step's loss. Rounds alternate which side runs first; the table holds the medians.
//
//   build/bench/lightning_cpu [--rounds 3] [--models mlp,cnn] [--processes 1,2] [--modes barebones,default]
//       [--limit-batches N] [--warmup 5] [--python "PYTHONPATH=... /usr/bin/python3"] [--torch-adamw default|fused]
//       [--same-allocator]
//
// The default --python is /usr/bin/python3 with this checkout's .deps/pytorch2 and .deps/lightning
// (tools/setup_lightning.sh) on PYTHONPATH.
#include <boost/program_options.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include "bench/bench_support.h"
#include "bench/step_models.h"
#include "fashion_mnist/fashion_mnist_data.h"
#include "trainer/run_main.h"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kBatch = 128;  // the main job's default batch (per process)
constexpr uint64_t kSeed = 42;   // the main job's seed: shuffling, dropout

// The 784-128-10 MLP on flattened images, defined again in bench/lightning_cpu_worker.py with the
// same parameter names (net.1.*, net.3.*) and shapes.
class SmallMlp : public volt::bench::StepModel {
 public:
  SmallMlp() {
    namespace nn = torch::nn;
    net_ = register_module("net", nn::Sequential(nn::Flatten(), nn::Linear(784, 128), nn::ReLU(), nn::Linear(128, 10)));
  }
  torch::Tensor forward(const torch::Tensor& images) override { return net_->forward(images); }

 private:
  torch::nn::Sequential net_{nullptr};
};

std::shared_ptr<volt::bench::StepModel> make_model(const std::string& name) {
  if (name == "mlp") return std::make_shared<SmallMlp>();
  if (name == "cnn") return std::make_shared<volt::bench::StepCnn>();
  throw volt::ConfigurationError("lightning_cpu: expected model mlp or cnn, got '" + name + "'");
}

// One run: which model, on how many processes, with which Trainer settings.
struct Config {
  std::string model;  // mlp | cnn
  int64_t processes = 1;
  std::string mode;  // barebones | default
  std::string name() const { return model + "_p" + std::to_string(processes) + "_" + mode; }
};

// The end of every training step on this rank, and its loss (kept as a tensor: reading it would
// add work to the step).
class StepEnds : public volt::Callback {
 public:
  void on_train_batch_end(volt::Trainer&, volt::Module&, const torch::Tensor& loss, const volt::Batch&,
                          int64_t) override {
    ends.push_back(std::chrono::steady_clock::now());
    losses.push_back(loss.detach());
  }
  std::vector<std::chrono::steady_clock::time_point> ends;
  std::vector<torch::Tensor> losses;
};

// The median of the steps warmup .. n-2, each from the end of the step before it to its own end
// (the last step is left out: its batch is the epoch's remainder). The Python worker's rule too.
double median_step_ms(const std::vector<std::chrono::steady_clock::time_point>& ends, int64_t warmup) {
  std::vector<double> steps;
  for (size_t i = static_cast<size_t>(std::max<int64_t>(warmup, 1)); i + 1 < ends.size(); ++i) {
    steps.push_back(std::chrono::duration<double, std::milli>(ends[i] - ends[i - 1]).count());
  }
  volt::check<volt::Error>(!steps.empty(), "lightning_cpu: ", ends.size(), " steps ran, too few to time after ",
                           warmup, " warm-up steps (raise --limit-batches)");
  return volt::bench::median(steps);
}

struct WorkerFlags {
  Config config;
  int64_t warmup = 5, limit_batches = 0;
  std::string root, data_dir, result;
};

// volt's side of one run (this process is rank 0; with two processes the Trainer's launcher starts
// rank 1 by executing this program again with the same arguments). Rank 0 writes "step_ms ..
// steps .. init_sum .. final_loss .. mean_loss .. threads .." to the result file.
void run_volt(const WorkerFlags& flags, volt::ProcessLauncher& launcher) {
  const Config& config = flags.config;
  volt::TrainerOptions options;
  options.accelerator = "cpu";
  options.devices = config.processes;
  options.strategy = config.processes > 1 ? "ddp" : "auto";
  options.max_epochs = 1;
  options.seed = kSeed;
  options.default_root_dir = flags.root;
  if (flags.limit_batches > 0) options.limit_train_batches = volt::BatchLimit::count(flags.limit_batches);
  auto model = make_model(config.model);
  const double init_sum = volt::bench::step_models_init(*model);
  if (config.mode == "default") {
    model->log_loss = true;  // train_loss every step, on the progress bar and to the CSV logger
  } else {
    options.enable_progress_bar = false;
    options.loggers.clear();
    options.enable_checkpointing = false;
    options.enable_model_summary = false;
  }
  volt::Trainer trainer(options, launcher);
  auto ends = std::make_shared<StepEnds>();
  trainer.add_callback(ends);
  // The main job's DataModule, all 60,000 training images (none held out), read in its setup.
  trainer.fit(model, std::make_shared<fashion_mnist::FashionMnistData>(fashion_mnist::FashionMnistOptions{
                         .data_dir = flags.data_dir, .batch_size = kBatch, .val_size = 0, .seed = kSeed}));
  if (!trainer.is_global_zero()) return;
  std::ofstream out(flags.result);
  char line[256];
  std::snprintf(line, sizeof line, "step_ms %.4f steps %zu init_sum %.9e final_loss %.6e mean_loss %.6e threads %lld\n",
                median_step_ms(ends->ends, flags.warmup), ends->ends.size(), init_sum,
                ends->losses.back().item<double>(), torch::stack(ends->losses).mean().item<double>(),
                static_cast<long long>(trainer.cpu_threads().intra_op));
  out << line;
  volt::check<volt::Error>(static_cast<bool>(out), "lightning_cpu: cannot write ", flags.result);
}

// What one run of one side measured.
struct Sample {
  double step_ms = 0, wall_s = 0, init_sum = 0, final_loss = 0, mean_loss = 0, steps = 0, threads = 0;
};

// Runs `command` with its stdout and stderr in `log`, and returns its wall time in seconds and
// what it wrote to `result`. Both sides are started alike, through the shell.
Sample run_side(const std::string& command, const std::string& log, const std::string& result) {
  fs::remove(result);
  const auto start = std::chrono::steady_clock::now();
  try {
    volt::bench::run_shell("{ " + command + " >" + log + " 2>&1; }", "lightning_cpu");
  } catch (const volt::Error& e) {
    std::ifstream in(log);
    std::stringstream text;
    text << in.rdbuf();
    const std::string all = text.str();
    throw volt::Error(std::string(e.what()) + "\nlast lines of " + log + ":\n" +
                      all.substr(all.size() > 3000 ? all.size() - 3000 : 0));
  }
  Sample sample;
  sample.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::ifstream in(result);
  std::stringstream text;
  text << in.rdbuf();
  const std::string line = text.str();
  const std::string who = "lightning_cpu (" + command + ")";
  sample.step_ms = volt::bench::number_after(line, "step_ms ", who);
  sample.steps = volt::bench::number_after(line, "steps ", who);
  sample.init_sum = volt::bench::number_after(line, "init_sum ", who);
  sample.final_loss = volt::bench::number_after(line, "final_loss ", who);
  sample.mean_loss = volt::bench::number_after(line, "mean_loss ", who);
  sample.threads = volt::bench::number_after(line, "threads ", who);
  return sample;
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

// Each side's samples of one configuration over the rounds.
struct Results {
  std::vector<Sample> volt, lightning;
};

double median_of(const std::vector<Sample>& samples, double Sample::*field) {
  std::vector<double> values;
  for (const auto& s : samples) values.push_back(s.*field);
  return volt::bench::median(values);
}

// The table, the goals and the sanity checks. Returns false (and prints why instead of the table)
// when the sides did not start from the same weights or did not compute with the same threads.
bool print_results(const std::vector<Config>& configs, std::map<std::string, Results>& results) {
  for (const auto& config : configs) {
    auto& r = results[config.name()];
    for (const auto& v : r.volt) {
      for (const auto& l : r.lightning) {
        if (std::abs(v.init_sum - l.init_sum) > 1e-9 * std::max(1.0, std::abs(v.init_sum))) {
          std::printf("NOT THE SAME INITIAL WEIGHTS (%s): volt's sum %.9e, Lightning's %.9e\n", config.name().c_str(),
                      v.init_sum, l.init_sum);
          return false;
        }
        if (v.threads != l.threads) {
          std::printf("NOT THE SAME THREADS (%s): volt %.0f, Lightning %.0f intra-op threads\n", config.name().c_str(),
                      v.threads, l.threads);
          return false;
        }
      }
    }
  }
  std::printf("\n| model | processes | mode | volt ms/step | Lightning ms/step | volt / Lightning | volt wall s | "
              "Lightning wall s | volt / Lightning |\n|---|---:|---|---:|---:|---:|---:|---:|---:|\n");
  for (const auto& config : configs) {
    auto& r = results[config.name()];
    const double vs = median_of(r.volt, &Sample::step_ms), ls = median_of(r.lightning, &Sample::step_ms);
    const double vw = median_of(r.volt, &Sample::wall_s), lw = median_of(r.lightning, &Sample::wall_s);
    std::printf("| %s | %lld | %s | %.3f | %.3f | **%.3f** | %.2f | %.2f | %.3f |\n", config.model.c_str(),
                static_cast<long long>(config.processes), config.mode.c_str(), vs, ls, vs / ls, vw, lw, vw / lw);
  }
  std::printf("\n");
  for (const auto& config : configs) {
    auto& r = results[config.name()];
    const double ratio = median_of(r.volt, &Sample::step_ms) / median_of(r.lightning, &Sample::step_ms);
    const double goal = config.model == "mlp" ? 0.7 : 0.95;
    std::printf("- %s, %lld process%s, %s: volt / Lightning step = %.3f (goal <= %.2f): %s\n", config.model.c_str(),
                static_cast<long long>(config.processes), config.processes > 1 ? "es" : "", config.mode.c_str(), ratio,
                goal, ratio <= goal ? "met" : "MISSED");
  }
  std::printf(
      "\nSanity (rank 0, median over rounds): steps run, intra-op threads, the last step's loss and the "
      "epoch's mean training loss\n\n"
      "| model | processes | mode | volt steps | Lightning steps | threads | volt last loss | Lightning last loss "
      "| volt mean loss | Lightning mean loss |\n|---|---:|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const auto& config : configs) {
    auto& r = results[config.name()];
    std::printf("| %s | %lld | %s | %.0f | %.0f | %.0f | %.4f | %.4f | %.4f | %.4f |\n", config.model.c_str(),
                static_cast<long long>(config.processes), config.mode.c_str(), median_of(r.volt, &Sample::steps),
                median_of(r.lightning, &Sample::steps), median_of(r.volt, &Sample::threads),
                median_of(r.volt, &Sample::final_loss), median_of(r.lightning, &Sample::final_loss),
                median_of(r.volt, &Sample::mean_loss), median_of(r.lightning, &Sample::mean_loss));
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  return volt::run_main([&](volt::ProcessLauncher& launcher) {
    int rounds = 3;
    std::string models = "mlp,cnn", processes = "1,2", modes = "barebones,default", python, torch_adamw = "default";
    bool same_allocator = false;
    std::string root = "/tmp/lightning_cpu", side;
    WorkerFlags worker;
    worker.data_dir = "/usr/share/datasets/fashion-mnist";
    po::options_description description("lightning_cpu");
    description.add_options()("help", "this text")(
        "rounds", po::value(&rounds)->default_value(rounds), "interleaved rounds")(
        "models", po::value(&models)->default_value(models), "mlp, cnn")(
        "processes", po::value(&processes)->default_value(processes), "1 (one process) and 2 (DDP)")(
        "modes", po::value(&modes)->default_value(modes), "barebones, default")(
        "limit-batches", po::value(&worker.limit_batches)->default_value(0),
        "training batches per process (0: the whole epoch); for a quick check")(
        "warmup", po::value(&worker.warmup)->default_value(worker.warmup), "steps left out of the median step")(
        "python", po::value(&python),
        "command running the Lightning worker (default: /usr/bin/python3 with .deps/pytorch2 and .deps/lightning)")(
        "torch-adamw", po::value(&torch_adamw)->default_value(torch_adamw),
        "Lightning's optimizer: default (torch.optim.AdamW as constructed) or fused (fused=True)")(
        "same-allocator", po::bool_switch(&same_allocator),
        "give the Python side the glibc malloc settings volt's Trainer sets for itself (GLIBC_TUNABLES)")(
        "data-dir", po::value(&worker.data_dir)->default_value(worker.data_dir), "Fashion-MNIST's *-ubyte.gz files")(
        "root", po::value(&root)->default_value(root), "where runs write logs, checkpoints and results")(
        "worker", po::value(&side), "internal: run volt's side of one configuration")(
        "model", po::value(&worker.config.model), "internal")(
        "devices", po::value(&worker.config.processes), "internal")("mode", po::value(&worker.config.mode), "internal")(
        "run-root", po::value(&worker.root), "internal")("result", po::value(&worker.result), "internal");
    if (!volt::bench::parse_flags(argc, argv, description)) return;

    if (!side.empty()) {
      run_volt(worker, launcher);
      return;
    }

    volt::check<volt::ConfigurationError>(torch_adamw == "default" || torch_adamw == "fused",
                                          "--torch-adamw: expected default or fused, got ", torch_adamw);
    std::vector<Config> configs;
    for (const auto& model : volt::bench::split_list(models)) {
      (void)make_model(model);  // a bad name fails now
      for (const auto& p : volt::bench::split_list(processes)) {
        for (const auto& mode : volt::bench::split_list(modes)) {
          volt::check<volt::ConfigurationError>(mode == "barebones" || mode == "default",
                                                "--modes: expected barebones or default, got ", mode);
          configs.push_back({model, std::stoll(p), mode});
          volt::check<volt::ConfigurationError>(configs.back().processes >= 1, "--processes: expected >= 1, got ", p);
        }
      }
    }
    const std::string source = VOLT_SOURCE_DIR;
    if (python.empty()) {
      python = "PYTHONPATH=" + source + "/.deps/pytorch2:" + source + "/.deps/lightning /usr/bin/python3";
    }
    const std::string self = volt::bench::self_path("lightning_cpu");
    const std::string script = source + "/bench/lightning_cpu_worker.py";
    const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
    const std::string versions = volt::bench::run_shell(
        python + " -c 'import torch, pytorch_lightning as pl; print(\"PyTorch\", torch.__version__, \"Lightning\", "
                 "pl.__version__)'",
        "lightning_cpu");
    fs::create_directories(root);

    // The version line only (the interpreter may warn first).
    const size_t version_line = versions.rfind("PyTorch ");
    std::printf("lightning_cpu: CPU, %lld cores, LibTorch %s; Python side: %s", static_cast<long long>(cores),
                TORCH_VERSION, versions.substr(version_line == std::string::npos ? 0 : version_line).c_str());
    std::printf(
        "Fashion-MNIST training set (60000 images) in memory, batch %lld per process, shuffled, one epoch%s; "
        "AdamW: volt::FusedAdamW vs torch.optim.AdamW (%s); %d round%s, medians\n",
        static_cast<long long>(kBatch),
        worker.limit_batches > 0 ? (" limited to " + std::to_string(worker.limit_batches) + " batches").c_str() : "",
        torch_adamw == "fused" ? "fused=True" : "its default, the for-loop implementation on the CPU", rounds,
        rounds == 1 ? "" : "s");
    std::printf("Threads per process: cores / processes intra-op (volt's Trainer rule; the Python side gets "
                "torch.set_num_threads and OMP_NUM_THREADS the same, OPENBLAS_NUM_THREADS=1)\n");
    std::printf(
        "Allocator: volt's Trainer sets glibc's malloc (mmap_threshold 32 MiB, trim_threshold 1 GiB); the Python "
        "side %s\n",
        same_allocator ? "gets the same through GLIBC_TUNABLES (--same-allocator)" : "runs with glibc's defaults");
    std::printf("Load average at start: %s\n", load_average().c_str());
    std::fflush(stdout);

    std::map<std::string, Results> results;
    for (int r = 0; r < rounds; ++r) {
      for (size_t i = 0; i < configs.size(); ++i) {
        const Config& config = configs[i];
        const int64_t threads = std::max<int64_t>(1, cores / config.processes);
        const std::string run_root = root + "/" + config.name();
        const std::string common = " --model " + config.model + " --mode " + config.mode + " --warmup " +
                                   std::to_string(worker.warmup) + " --limit-batches " +
                                   std::to_string(worker.limit_batches) + " --data-dir " + worker.data_dir;
        const std::string volt_command = self + " --worker volt --devices " + std::to_string(config.processes) +
                                         " --run-root " + run_root + "/volt --result " + run_root + "/volt.result" +
                                         common;
        const std::string lightning_command =
            "OMP_NUM_THREADS=" + std::to_string(threads) + " OPENBLAS_NUM_THREADS=1 " +
            (same_allocator ? "GLIBC_TUNABLES=" + std::string(volt::bench::kTrainerMallocTunables) + " " : "") +
            python + " " + script + " --processes " + std::to_string(config.processes) + " --threads " +
            std::to_string(threads) + " --adamw " + torch_adamw + " --root " + run_root + "/lightning --result " +
            run_root + "/lightning.result" + common;
        // Alternate which side goes first, by round and by configuration.
        const bool volt_first = (r + static_cast<int>(i)) % 2 == 0;
        for (int k = 0; k < 2; ++k) {
          const bool volt_side = (k == 0) == volt_first;
          const std::string name = volt_side ? "volt" : "lightning";
          fs::remove_all(run_root + "/" + name);  // every run starts from an empty directory
          fs::create_directories(run_root + "/" + name);
          std::cerr << "lightning_cpu: round " << r << ", " << config.name() << ", " << name << "\n";
          const auto sample = run_side(volt_side ? volt_command : lightning_command, run_root + "/" + name + ".log",
                                       run_root + "/" + name + ".result");
          (volt_side ? results[config.name()].volt : results[config.name()].lightning).push_back(sample);
        }
      }
    }
    std::printf("Load average at end: %s\n", load_average().c_str());
    volt::check<volt::Error>(print_results(configs, results),
                             "lightning_cpu: the sides did not run alike (see above); no table");
  });
}

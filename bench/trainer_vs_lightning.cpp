// volt against PyTorch Lightning and the raw loops of both worlds, step for step (docs/benchmarks.md,
// "volt against PyTorch Lightning"): the same three models (bench/step_models.h, defined again in
// bench/trainer_vs_lightning_worker.py), the same initial weights, synthetic data already on the
// device (no loader work timed), batch, AdamW and precision on both sides.
//
// Rows. volt (this program re-executed with --worker): the Trainer at its defaults (progress bar,
// CSV logger, checkpointing, model summary; logs train_loss every step), the Trainer barebones
// (all four off, nothing logged), the Fabric loop, a raw LibTorch loop, and `ddp` / `fsdp` on one
// rank (NCCL on the GPU, Gloo on the CPU). Python (the worker, under --python): Lightning's
// Trainer with barebones=True and at its defaults, a raw PyTorch loop, Lightning's ddp and fsdp on
// one rank. Each row: the median over rounds of the ms per step over `steps` steps after `warmup`
// steps (the device synchronized at both ends of that window, not in between), samples (tokens
// for the GPT) per second, and peak GPU memory allocated. Rounds alternate which side runs first;
// within a worker the rows rotate by round.
//
//   build/bench/trainer_vs_lightning [--device cuda|cpu] [--models cnn,mlp,gpt] [--rounds 3]
//       [--steps N --warmup W] [--python "python3"] [--peak-tflops T] [--partial FILE]
// On the CPU (no GPU) the default is the CNN and the MLP, volt's rows only; --python adds the
// Lightning rows (e.g. --python "PYTHONPATH=.deps/pytorch2:.deps/lightning /usr/bin/python3",
// after tools/setup_lightning.sh).
#include <boost/program_options.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <regex>
#include <sstream>

#include "bench/bench_support.h"
#include "bench/step_clock.h"
#include "bench/step_models.h"
#include "core/cpu_threads.h"
#include "core/device_memory.h"
#include "trainer/run_main.h"

namespace po = boost::program_options;
using volt::bench::ClockCallback;
using volt::bench::kPhases;
using volt::bench::Mark;
using volt::bench::StepClock;
using volt::bench::StepModel;
using volt::bench::Window;

namespace {

const std::vector<std::string> kVoltRows = {"volt_trainer", "volt_trainer_barebones", "volt_fabric", "raw_libtorch",
                                            "raw_libtorch_fused", "volt_ddp", "volt_fsdp", "volt_cuda_graph"};
const std::vector<std::string> kPythonRows = {"lightning_default", "lightning_barebones", "raw_pytorch",
                                              "raw_pytorch_fused", "lightning_ddp", "lightning_fsdp",
                                              "raw_pytorch_compiled", "raw_pytorch_autotuned"};

// The rows that run on this device: a captured step (volt_cuda_graph, the barebones Trainer with
// --cuda-graph) and torch.compile's rows need CUDA, and compile only the GPT.
std::vector<std::string> rows_for(const std::vector<std::string>& all, bool cuda, const std::string& model) {
  std::vector<std::string> rows;
  for (const auto& row : all) {
    const bool captured = row == "volt_cuda_graph" || row == "raw_pytorch_compiled" || row == "raw_pytorch_autotuned";
    if (!captured || (cuda && model == "gpt")) rows.push_back(row);
  }
  return rows;
}

struct RunSettings {
  std::string model;
  torch::Device device = torch::kCPU;
  Window window;
  std::string root;
  int64_t round = 0;  // seeds torch's generator for the row (dropout), as the worker does
};

std::shared_ptr<volt::DataLoader> make_loader(const RunSettings& run, const volt::bench::StepModelSpec& spec) {
  auto [x, y] =
      volt::bench::step_models_data(run.model, (run.window.warmup + run.window.steps) * spec.batch, run.device);
  return std::make_shared<volt::DataLoader>(std::make_shared<volt::TensorDataset>(x, y),
                                            volt::DataLoaderOptions{.batch_size = spec.batch});
}

void train_with_trainer(const std::string& row, const RunSettings& run, const volt::bench::StepModelSpec& spec,
                        const std::shared_ptr<StepModel>& model, StepClock& clock) {
  volt::TrainerOptions options;
  options.accelerator = run.device.is_cuda() ? "cuda" : "cpu";
  options.precision = spec.precision;
  options.max_epochs = 1;
  options.max_steps = run.window.warmup + run.window.steps;
  options.default_root_dir = run.root + "/" + row;
  if (row == "volt_trainer") {
    model->log_loss = true;  // and every other default left on, like Lightning's default row
  } else {
    options.enable_progress_bar = false;
    options.loggers.clear();
    options.enable_checkpointing = false;
    options.enable_model_summary = false;
    if (row == "volt_ddp") options.strategy = "ddp";
    if (row == "volt_fsdp") options.strategy = "fsdp";
    options.cuda_graph = row == "volt_cuda_graph";
  }
  volt::Trainer trainer(options);
  trainer.add_callback(std::make_shared<ClockCallback>(clock));
  trainer.fit(model, make_loader(run, spec));
}

void train_with_fabric(const RunSettings& run, const volt::bench::StepModelSpec& spec,
                       const std::shared_ptr<StepModel>& model, StepClock& clock) {
  volt::FabricOptions options;
  options.accelerator = run.device.is_cuda() ? "cuda" : "cpu";
  options.precision = spec.precision;
  volt::Fabric fabric(options);
  fabric.launch();
  auto [module, optimizer] = fabric.setup(model, StepModel::make_optimizer(model->parameters()));
  auto loader = fabric.setup_dataloader(make_loader(run, spec));
  for (int64_t i = 0; i < loader->num_batches(); ++i) {
    clock.before_step(i);
    const auto batch = loader->batch(i);
    torch::Tensor loss;
    {
      auto autocast = fabric.autocast();  // the loss too, as the Trainer's training_step runs
      loss = model->loss(module->forward(batch.input), batch.target);
    }
    clock.mark(i, Mark::ForwardEnd);
    fabric.backward(loss);
    clock.mark(i, Mark::BackwardEnd);
    clock.mark(i, Mark::OptimizerStart);
    fabric.step(*optimizer);
    clock.mark(i, Mark::OptimizerEnd);
    fabric.zero_grad(*optimizer);
    clock.after_step(i, loss);
  }
}

// Autocast to bfloat16 on `device`'s type for one scope, as a LibTorch user writes it by hand.
class BfloatAutocast {
 public:
  BfloatAutocast(c10::DeviceType type, bool enabled) : type_(type), enabled_(enabled) {
    if (!enabled_) return;
    volt::compat::set_autocast_dtype(type_, torch::kBFloat16);
    volt::compat::set_autocast_enabled(type_, true);
  }
  ~BfloatAutocast() {
    if (!enabled_) return;
    volt::compat::set_autocast_enabled(type_, false);
    at::autocast::clear_cache();
  }
  BfloatAutocast(const BfloatAutocast&) = delete;
  BfloatAutocast& operator=(const BfloatAutocast&) = delete;

 private:
  c10::DeviceType type_;
  bool enabled_;
};

// What a LibTorch user writes without a framework: with LibTorch's AdamW, or with volt's fused one
// (the optimizer of volt's rows, so that volt / raw_libtorch_fused is the framework's own cost).
void train_raw(const RunSettings& run, const volt::bench::StepModelSpec& spec, const std::shared_ptr<StepModel>& model,
               StepClock& clock, bool fused) {
  model->to(run.device);
  model->train();
  auto optimizer = StepModel::make_optimizer(model->parameters(), fused);
  auto [x, y] =
      volt::bench::step_models_data(run.model, (run.window.warmup + run.window.steps) * spec.batch, run.device);
  for (int64_t i = 0; i < run.window.warmup + run.window.steps; ++i) {
    clock.before_step(i);
    torch::Tensor loss;
    {
      BfloatAutocast autocast(run.device.type(), spec.precision == "bf16-mixed");
      loss =
          model->loss(model->forward(x.narrow(0, i * spec.batch, spec.batch)), y.narrow(0, i * spec.batch, spec.batch));
    }
    clock.mark(i, Mark::ForwardEnd);
    loss.backward();
    clock.mark(i, Mark::BackwardEnd);
    clock.mark(i, Mark::OptimizerStart);
    optimizer->step();
    clock.mark(i, Mark::OptimizerEnd);
    optimizer->zero_grad();
    clock.after_step(i, loss);
  }
}

// One volt row in this process: prints "ROW <row> step_ms .. samples_per_s .. peak_bytes ..
// init_sum .. final_loss .." (or "ROW <row> error <what>").
void run_volt_row(const std::string& row, const RunSettings& run) {
  const auto spec = volt::bench::step_model_spec(run.model);
  try {
    torch::manual_seed(run.round);
    volt::reset_peak_allocated_bytes(run.device);
    auto model = volt::bench::make_step_model(run.model);
    const double init_sum = volt::bench::step_models_init(*model);
    StepClock clock(run.device, run.window);
    if (row == "volt_fabric") {
      train_with_fabric(run, spec, model, clock);
    } else if (row == "raw_libtorch" || row == "raw_libtorch_fused") {
      train_raw(run, spec, model, clock, row == "raw_libtorch_fused");
    } else {
      train_with_trainer(row, run, spec, model, clock);
    }
    const double seconds = clock.seconds();
    std::printf("\nROW %s step_ms %.4f samples_per_s %.2f peak_bytes %lld init_sum %.9e final_loss %.6e phases_us %s\n",
                row.c_str(), 1e3 * seconds / static_cast<double>(run.window.steps),
                static_cast<double>(spec.batch * spec.sequence * run.window.steps) / seconds,
                static_cast<long long>(volt::peak_allocated_bytes(run.device).value_or(0)), init_sum,
                clock.final_loss(), clock.phases().c_str());
  } catch (const std::exception& e) {
    std::string what = e.what();
    std::replace(what.begin(), what.end(), '\n', ' ');
    std::printf("\nROW %s error %s\n", row.c_str(), what.c_str());
  }
  std::fflush(stdout);
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ",") + item;
  return out;
}

// What one row measured in one round.
struct Sample {
  double step_ms = 0, per_s = 0, peak_bytes = 0, init_sum = 0, final_loss = 0;
};

// Every row's samples over the rounds, or the error it reported.
struct RowResults {
  std::vector<Sample> samples;
  std::vector<std::vector<double>> phases;  // per round: host microseconds per kPhases entry (volt's rows)
  std::string error;
};

void parse_rows(const std::string& output, std::map<std::string, RowResults>& rows) {
  static const std::regex measured(
      R"(ROW (\S+) step_ms (\S+) samples_per_s (\S+) peak_bytes (\S+) init_sum (\S+) final_loss (\S+))");
  static const std::regex failed(R"(ROW (\S+) error ([^\n]*))");
  for (std::sregex_iterator it(output.begin(), output.end(), measured), end; it != end; ++it) {
    rows[(*it)[1]].samples.push_back({std::stod((*it)[2]), std::stod((*it)[3]), std::stod((*it)[4]),
                                      std::stod((*it)[5]), std::stod((*it)[6])});
  }
  for (std::sregex_iterator it(output.begin(), output.end(), failed), end; it != end; ++it) {
    rows[(*it)[1]].error = (*it)[2];
  }
  static const std::regex phased(R"(ROW (\S+) step_ms [^\n]* phases_us (\S+))");
  for (std::sregex_iterator it(output.begin(), output.end(), phased), end; it != end; ++it) {
    std::vector<double> phases;
    std::stringstream in((*it)[2].str());
    for (std::string value; std::getline(in, value, '/');) phases.push_back(std::stod(value));
    rows[(*it)[1]].phases.push_back(phases);
  }
}

struct Flags {
  std::string device, models, python, root = "/tmp/trainer_vs_lightning", partial;
  int rounds = 3;
  int64_t steps = 0, warmup = -1;
  double peak_tflops = 0;
};

// Steps and warm-up per model: enough for a stable median, short enough for the GPU check's budget.
Window window_for(const Flags& flags, const std::string& model, bool cuda) {
  Window window{cuda ? (model == "gpt" ? 30 : model == "mlp" ? 100 : 200) : (model == "gpt" ? 2 : 10),
                cuda ? (model == "gpt" ? 5 : 20) : 3};
  if (flags.steps > 0) window.steps = flags.steps;
  if (flags.warmup >= 0) window.warmup = flags.warmup;
  return window;
}

// The bf16 dense peak of the GPU, from its name (NVIDIA's data sheets), for the GPT row's MFU.
double peak_tflops_of(const std::string& gpu) {
  if (gpu.find("H100") != std::string::npos) return gpu.find("PCIe") != std::string::npos ? 756.0 : 989.4;
  if (gpu.find("H200") != std::string::npos) return 989.4;
  if (gpu.find("A100") != std::string::npos) return 312.0;
  return 0;
}

std::string describe_model(const std::string& model) {
  if (model == "cnn") return "the main job's CNN";
  if (model == "mlp") return "MLP 1024-4096-4096-10";
  return "GPT decoder (6 layers, d_model 768, 12 heads, sequence 512, vocabulary 50304)";
}

const char* pair_of(const std::string& row) {
  static const std::map<std::string, const char*> pairs = {
      {"volt_trainer", "lightning_default"}, {"volt_trainer_barebones", "lightning_barebones"},
      {"raw_libtorch", "raw_pytorch"},       {"raw_libtorch_fused", "raw_pytorch_fused"},
      {"volt_ddp", "lightning_ddp"},         {"volt_fsdp", "lightning_fsdp"},
      {"volt_cuda_graph", "raw_pytorch_compiled"}};
  const auto it = pairs.find(row);
  return it == pairs.end() ? nullptr : it->second;
}

// The table of one model, and its goals. Returns false when the sides' initial weights differ.
bool print_model(std::FILE* out, const std::string& model, const Window& window,
                 std::map<std::string, RowResults>& rows, double peak_tflops, bool cuda) {
  const auto spec = volt::bench::step_model_spec(model);
  std::map<std::string, Sample> medians;
  for (auto& [row, results] : rows) {
    if (results.samples.empty()) continue;
    auto column = [&](double Sample::*field) {
      std::vector<double> values;
      for (const auto& s : results.samples) values.push_back(s.*field);
      return volt::bench::median(values);
    };
    medians[row] = {column(&Sample::step_ms), column(&Sample::per_s), column(&Sample::peak_bytes),
                    results.samples.front().init_sum, column(&Sample::final_loss)};
  }
  double flops_per_step = 0;
  int64_t matmul_parameters = 0;
  if (model == "gpt") {
    matmul_parameters = volt::bench::StepGpt().matmul_parameters();
    const double tokens = static_cast<double>(spec.batch * spec.sequence);
    flops_per_step = tokens * (6.0 * static_cast<double>(matmul_parameters) +
                               12.0 * volt::bench::kGptLayers * volt::bench::kGptWidth * volt::bench::kGptSequence);
  }
  std::fprintf(out, "\n### %s: batch %lld, %s, %lld steps timed after %lld, median of the rounds\n\n",
               describe_model(model).c_str(), static_cast<long long>(spec.batch), spec.precision.c_str(),
               static_cast<long long>(window.steps), static_cast<long long>(window.warmup));
  std::fprintf(out,
               "| row | ms/step | %s/s | peak %s MiB | / raw LibTorch (same AdamW) | / its Python row "
               "|%s\n|---|---:|---:|---:|---:|---:|%s\n",
               model == "gpt" ? "tokens" : "samples", cuda ? "GPU" : "device",
               flops_per_step > 0 && peak_tflops > 0 ? " MFU |" : "",
               flops_per_step > 0 && peak_tflops > 0 ? "---:|" : "");
  // volt's rows train with FusedAdamW: their "/ raw LibTorch" is against the raw loop with it.
  const auto raw = medians.find("raw_libtorch_fused");
  std::vector<std::string> order = kVoltRows;
  order.insert(order.end(), kPythonRows.begin(), kPythonRows.end());
  for (const auto& row : order) {
    const auto found = rows.find(row);
    if (found == rows.end()) continue;
    if (!found->second.error.empty() && !medians.count(row)) {
      std::fprintf(out, "| %s | error: %s | | | | |\n", row.c_str(), found->second.error.substr(0, 160).c_str());
      continue;
    }
    const auto& m = medians[row];
    const char* pair = pair_of(row);
    auto lightning = pair ? medians.find(pair) : medians.end();
    // The captured step against the faster of torch.compile's two modes.
    if (row == "volt_cuda_graph") {
      const auto autotuned = medians.find("raw_pytorch_autotuned");
      if (autotuned != medians.end() &&
          (lightning == medians.end() || autotuned->second.step_ms < lightning->second.step_ms)) {
        lightning = autotuned;
      }
    }
    std::string vs_raw = "", vs_lightning = "";
    char cell[64];
    if (row.rfind("volt_", 0) == 0 && raw != medians.end()) {
      std::snprintf(cell, sizeof cell, "%.3f", m.step_ms / raw->second.step_ms);
      vs_raw = cell;
    }
    if (lightning != medians.end()) {
      std::snprintf(cell, sizeof cell, "%.3f", m.step_ms / lightning->second.step_ms);
      vs_lightning = cell;
    }
    std::string mfu;
    if (flops_per_step > 0 && peak_tflops > 0) {
      std::snprintf(cell, sizeof cell, " %.1f%% |", 100.0 * flops_per_step / (m.step_ms * 1e-3) / (peak_tflops * 1e12));
      mfu = cell;
    }
    std::fprintf(out, "| %s | %.3f | %.0f | %.1f | %s | %s |%s\n", row.c_str(), m.step_ms, m.per_s,
                 volt::bench::mib(m.peak_bytes), vs_raw.c_str(), vs_lightning.c_str(), mfu.c_str());
  }
  // Same weights on both sides, or the comparison means nothing.
  bool same = true;
  for (const auto& [row, m] : medians) {
    const auto& [first, f] = *medians.begin();
    if (std::abs(m.init_sum - f.init_sum) > 1e-9 * std::max(1.0, std::abs(f.init_sum))) {
      std::fprintf(out, "\nNOT THE SAME INITIAL WEIGHTS: %s sums to %.9e, %s to %.9e\n", row.c_str(), m.init_sum,
                  first.c_str(), f.init_sum);
      same = false;
    }
  }
  // The same training on both sides: each row's median final loss (rounds seed dropout alike).
  double lowest = INFINITY, highest = -INFINITY;
  for (const auto& [row, m] : medians) {
    lowest = std::min(lowest, m.final_loss);
    highest = std::max(highest, m.final_loss);
  }
  if (!medians.empty())
    std::fprintf(out, "\nFinal loss of every row (median over rounds): %.6f to %.6f\n", lowest, highest);
  // Where volt's rows spend host time per step (medians over the rounds); no synchronization added.
  std::fprintf(out, "\nHost time per step and phase, microseconds (volt's rows; median of the rounds):\n\n| row |");
  for (const auto& phase : kPhases) std::fprintf(out, " %s |", phase.c_str());
  std::fprintf(out, " sum |\n|---|");
  for (size_t i = 0; i <= kPhases.size(); ++i) std::fprintf(out, "---:|");
  std::fprintf(out, "\n");
  for (const auto& row : kVoltRows) {
    const auto found = rows.find(row);
    if (found == rows.end() || found->second.phases.empty()) continue;
    std::fprintf(out, "| %s |", row.c_str());
    double sum = 0;
    for (size_t i = 0; i < kPhases.size(); ++i) {
      std::vector<double> values;
      for (const auto& round : found->second.phases) values.push_back(i < round.size() ? round[i] : 0.0);
      const double value = volt::bench::median(values);
      sum += value;
      std::fprintf(out, " %.1f |", value);
    }
    std::fprintf(out, " %.1f |\n", sum);
  }
  auto goal = [&](const std::string& what, const std::string& row, const std::string& base, double limit) {
    if (!medians.count(row) || !medians.count(base)) return;
    const double ratio = medians[row].step_ms / medians[base].step_ms;
    std::fprintf(out, "- %s: %s / %s = %.3f (goal <= %.2f): %s\n", what.c_str(), row.c_str(), base.c_str(), ratio,
                 limit, ratio <= limit ? "met" : "MISSED");
  };
  std::fprintf(out, "\n");
  goal("volt over raw LibTorch (same AdamW)", "volt_trainer", "raw_libtorch_fused", 1.03);
  goal("volt over raw LibTorch (same AdamW)", "volt_trainer_barebones", "raw_libtorch_fused", 1.03);
  const double lightning_limit = model == "gpt" ? 1.0 : 0.8;
  goal("volt over Lightning", "volt_trainer", "lightning_default", lightning_limit);
  goal("volt over Lightning", "volt_trainer_barebones", "lightning_barebones", lightning_limit);
  goal("volt over Lightning", "volt_ddp", "lightning_ddp", lightning_limit);
  goal("volt over Lightning", "volt_fsdp", "lightning_fsdp", lightning_limit);
  // Figures to read, no goals: what the optimizer costs on each side, and LibTorch against PyTorch.
  auto ratio = [&](const std::string& what, const std::string& row, const std::string& base) {
    if (!medians.count(row) || !medians.count(base)) return;
    std::fprintf(out, "- %s: %s / %s = %.3f\n", what.c_str(), row.c_str(), base.c_str(),
                 medians[row].step_ms / medians[base].step_ms);
  };
  ratio("LibTorch's AdamW over volt's FusedAdamW", "raw_libtorch", "raw_libtorch_fused");
  ratio("PyTorch's default AdamW (foreach) over fused=True", "raw_pytorch", "raw_pytorch_fused");
  ratio("raw LibTorch over raw PyTorch, each one's fused AdamW", "raw_libtorch_fused", "raw_pytorch_fused");
  if (flops_per_step > 0) {
    std::fprintf(out,
                 "- GPT FLOPs per step: %.3e (6 x %lld matmul parameters x tokens + 12 x layers x d_model x sequence "
                 "x tokens)%s\n",
                 flops_per_step, static_cast<long long>(matmul_parameters),
                 peak_tflops > 0 ? "" : "; MFU not printed: unknown device peak (--peak-tflops)");
  }
  return same;
}

}  // namespace

int main(int argc, char** argv) {
  return volt::run_main([&] {
    Flags flags;
    std::string worker, rows_flag;
    int64_t round = 0;
    po::options_description description("trainer_vs_lightning");
    description.add_options()("help", "this text")(
        "device", po::value(&flags.device), "cuda or cpu (default: cuda when LibTorch sees a GPU)")(
        "models", po::value(&flags.models), "cnn,mlp,gpt (default: all three on the GPU, cnn,mlp on the CPU)")(
        "rounds", po::value(&flags.rounds)->default_value(flags.rounds), "interleaved rounds")(
        "steps", po::value(&flags.steps)->default_value(flags.steps), "timed steps per run (0: per model)")(
        "warmup", po::value(&flags.warmup)->default_value(flags.warmup), "untimed steps first (-1: per model)")(
        "python", po::value(&flags.python),
        "command running the Lightning worker (default: $VOLT_LIGHTNING_PYTHON, else python3 on the GPU; "
        "none on the CPU; \"\": volt's rows only)")(
        "root", po::value(&flags.root)->default_value(flags.root), "where the Trainers write their logs")(
        "partial", po::value(&flags.partial), "rewrite this file with the tables after every round")(
        "peak-tflops", po::value(&flags.peak_tflops)->default_value(0.0),
        "the GPU's bf16 dense peak for MFU (0: from its name)")(
        "worker", po::value(&worker), "internal: run volt's rows of this model")(
        "rows", po::value(&rows_flag), "internal: the rows to run")(
        "round", po::value(&round), "internal: the round (rotates the rows)");
    po::variables_map values;
    po::store(po::parse_command_line(argc, argv, description), values);
    po::notify(values);
    if (values.count("help")) {
      std::cout << description;
      return;
    }
    const bool cuda = flags.device.empty() ? torch::cuda::is_available() : flags.device == "cuda";
    volt::check<volt::ConfigurationError>(flags.device.empty() || flags.device == "cuda" || flags.device == "cpu",
                                          "--device: expected cuda or cpu, got ", flags.device);
    volt::check<volt::ConfigurationError>(!cuda || torch::cuda::is_available(),
                                          "--device cuda: LibTorch sees no CUDA device (run with --device cpu)");
    const torch::Device device = cuda ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);

    if (!worker.empty()) {
      // Every row under the thread settings the Trainer picks for one process (it applies them at
      // fit; the raw loop would otherwise inherit whatever the row before it left).
      volt::configure_cpu_threads({});
      const RunSettings run{worker, device, window_for(flags, worker, cuda), flags.root, round};
      auto rows = volt::bench::split_list(rows_flag);
      std::rotate(rows.begin(), rows.begin() + static_cast<long>(round % static_cast<int64_t>(rows.size())),
                  rows.end());
      for (const auto& row : rows) run_volt_row(row, run);
      return;
    }

    const auto models =
        volt::bench::split_list(flags.models.empty() ? (cuda ? "cnn,mlp,gpt" : "cnn,mlp") : flags.models);
    for (const auto& model : models) (void)volt::bench::step_model_spec(model);  // a bad name fails now
    if (!values.count("python")) {
      const char* from_env = std::getenv("VOLT_LIGHTNING_PYTHON");
      flags.python = from_env ? from_env : (cuda ? "python3" : "");
    }
    const std::string self = volt::bench::self_path("trainer_vs_lightning");
    const std::string script = std::string(VOLT_SOURCE_DIR) + "/bench/trainer_vs_lightning_worker.py";
    std::string gpu;
    if (cuda)
      gpu =
          volt::bench::run_shell("nvidia-smi --query-gpu=name --format=csv,noheader | head -1", "trainer_vs_lightning");
    gpu.erase(gpu.find_last_not_of(" \n") + 1);
    const double peak_tflops = flags.peak_tflops > 0 ? flags.peak_tflops : peak_tflops_of(gpu);

    std::string python_side;
    if (!flags.python.empty()) {
      // The version line only (the interpreter may warn on stderr, which run_shell keeps).
      static const std::regex version_line("PyTorch [^\n]*");
      const auto versions = volt::bench::run_shell(
          flags.python + " -c 'import torch, pytorch_lightning as pl; print(\"PyTorch\", torch.__version__, "
                         "\"Lightning\", pl.__version__)'",
          "trainer_vs_lightning");
      std::smatch match;
      python_side = std::regex_search(versions, match, version_line) ? match.str() : "?";
    }
    std::map<std::string, std::map<std::string, RowResults>> results;  // model -> row -> results
    // The tables over the rounds done so far; false when the sides' initial weights differ.
    auto print_tables = [&](std::FILE* out, int rounds_done) {
      std::fprintf(out, "trainer_vs_lightning: %s, LibTorch %s, %d rounds%s\n", cuda ? gpu.c_str() : "CPU",
                   TORCH_VERSION, rounds_done, flags.python.empty() ? ", volt's rows only" : "");
      if (!python_side.empty()) std::fprintf(out, "Python side: %s\n", python_side.c_str());
      if (cuda && peak_tflops > 0) std::fprintf(out, "bf16 dense peak for MFU: %.1f TFLOP/s\n", peak_tflops);
      bool same = true;
      for (const auto& model : models) {
        same = print_model(out, model, window_for(flags, model, cuda), results[model], peak_tflops, cuda) && same;
      }
      return same;
    };
    for (int r = 0; r < flags.rounds; ++r) {
      for (const auto& model : models) {
        const Window window = window_for(flags, model, cuda);
        const std::string common = " --device " + std::string(cuda ? "cuda" : "cpu") + " --steps " +
                                   std::to_string(window.steps) + " --warmup " + std::to_string(window.warmup) +
                                   " --round " + std::to_string(r) + " --root " + flags.root;
        const std::string volt_command =
            self + " --worker " + model + " --rows " + join(rows_for(kVoltRows, cuda, model)) + common;
        const std::string python_command = flags.python + " " + script + " --model " + model + " --rows " +
                                           join(rows_for(kPythonRows, cuda, model)) + common;
        std::vector<std::string> commands = {volt_command};
        if (!flags.python.empty()) commands.insert(r % 2 ? commands.begin() : commands.end(), python_command);
        for (const auto& command : commands) {
          std::cerr << "trainer_vs_lightning: round " << r << ", " << model << ": " << command << "\n";
          parse_rows(volt::bench::run_shell(command, "trainer_vs_lightning"), results[model]);
        }
      }
      // A run stopped by a time limit still leaves the tables of the rounds it finished.
      if (!flags.partial.empty()) {
        if (std::FILE* out = std::fopen(flags.partial.c_str(), "w")) {
          print_tables(out, r + 1);
          std::fclose(out);
        }
      }
    }
    volt::check<volt::Error>(print_tables(stdout, flags.rounds),
                             "trainer_vs_lightning: the sides did not start from the same weights (see above)");
  });
}

// Pipeline stages (strategies/pipeline/, Note [Running a pipeline stage]) as processes on one
// host, one compute thread each, their activations and gradients passed by point-to-point sends
// over Gloo: for GPipe, 1F1B and interleaved 1F1B (V chunks a rank), and for M micro-batches,
// each stage's measured idle fraction (1 - the step's time spent computing / the step's time,
// medians over the timed steps) against the bubble formula (S - 1) / (V·M + S - 1) (V = 1 but
// interleaved), and each stage's peak of live CPU tensors during a
// step above what it held before it (the activations it keeps for its backwards; counted by a
// counting allocator, bench/counting_allocator.h) with the micro-batches it held at once.
//
// The model: 16 blocks of Linear(width, width) + Tanh, cut into S (interleaved: S·V) stages of equal parameters;
// micro-batches of 64 rows; mean squared error on the last stage. S stages share the machine's
// cores: where S exceeds the cores, stages that compute at once slow each other, which counts
// as compute, not idle.
//
//   build/bench/pipeline_bubble [--stages 4] [--microbatches 4,8,16] [--virtual-stages 2] [--width 1024]
//                               [--steps 5] [--warmup 2]
#include <boost/program_options.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "bench/bench_support.h"
#include "bench/counting_allocator.h"
#include "bench/run_ranks.h"
#include "distributed/communicator.h"
#include "distributed/network.h"
#include "strategies/pipeline/pipeline_stage.h"
#include "strategies/pipeline/stage_split.h"

namespace po = boost::program_options;
using volt::pipeline::PipelineSchedule;

namespace {

constexpr int64_t kBlocks = 16, kRows = 64;

struct StageFigures {
  double idle = 0;      // median idle fraction
  double ms = 0;        // median step
  double peak_mib = 0;  // live CPU tensors at the step's peak above its start
  int64_t held = 0;     // micro-batches held at once
};

// One stage: prints "idle ms peak_mib held" to `out`.
int run_stage(int64_t rank, int64_t stages, int64_t port, const std::string& schedule_name, int64_t microbatches,
              int64_t chunks, int64_t width, int steps, int warmup, const std::string& out) {
  auto& allocator = volt::bench::CountingCPUAllocator::install();
  torch::set_num_threads(1);
  volt::CommunicatorOptions options;
  options.rank = rank;
  options.world_size = stages;
  options.master_port = port;
  options.timeout = std::chrono::minutes(5);
  auto group = volt::Communicator::connect(options);
  torch::manual_seed(0);
  torch::nn::Sequential model;
  for (int64_t b = 0; b < kBlocks; ++b) {
    model->push_back(torch::nn::Linear(width, width));
    model->push_back(torch::nn::Tanh());
  }
  const auto schedule = volt::pipeline::parse_pipeline_schedule(schedule_name);
  if (schedule != PipelineSchedule::Interleaved1F1B) chunks = 1;
  const auto starts =
      volt::pipeline::balanced_stage_starts(volt::pipeline::entry_parameter_counts(model), stages * chunks);
  std::vector<torch::nn::Sequential> mine;
  for (int64_t v = 0; v < chunks; ++v) mine.push_back(volt::pipeline::stage_of(model, starts, v * stages + rank));
  std::vector<int64_t> every;
  for (int64_t r = 0; r < stages; ++r) every.push_back(r);
  const auto gradients = chunks > 1 ? group->new_group(every) : nullptr;
  volt::pipeline::PipelineStage stage = gradients ? volt::pipeline::PipelineStage(mine, *group, *gradients)
                                                  : volt::pipeline::PipelineStage(mine[0], *group);
  torch::optim::SGD sgd(stage.parameters(), torch::optim::SGDOptions(1e-3));
  const auto loss = [](const torch::Tensor& y, const torch::Tensor& t) { return (y - t).square().mean(); };
  std::vector<double> idle, ms, peak;
  for (int s = 0; s < warmup + steps; ++s) {
    std::vector<torch::Tensor> inputs, targets;
    for (int64_t i = 0; i < microbatches; ++i) {
      if (stage.is_first()) inputs.push_back(torch::randn({kRows, width}));
      if (stage.is_last()) targets.push_back(torch::randn({kRows, width}));
    }
    sgd.zero_grad();
    const int64_t before = allocator.live();
    allocator.reset_peak();
    stage.run(schedule, microbatches, inputs, targets, loss);
    const int64_t top = allocator.peak();
    sgd.step();
    if (s < warmup) continue;
    idle.push_back(stage.last_step().idle_fraction());
    ms.push_back(stage.last_step().seconds * 1e3);
    peak.push_back(volt::bench::mib(static_cast<double>(top - before)));
  }
  std::ofstream(out) << volt::bench::median(idle) << " " << volt::bench::median(ms) << " " << volt::bench::median(peak)
                     << " " << stage.last_step().peak_microbatches_held << "\n";
  group->barrier();
  return 0;
}

std::vector<StageFigures> run_pipeline(const std::string& self, int64_t stages, const std::string& schedule,
                                       int64_t microbatches, int64_t chunks, int64_t width, int steps, int warmup) {
  const auto dir = std::filesystem::temp_directory_path() / ("volt_pipeline_bubble_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto port = std::to_string(volt::find_free_port());
  std::vector<std::vector<std::string>> argvs;
  for (int64_t r = 0; r < stages; ++r) {
    argvs.push_back({self, "--worker-rank", std::to_string(r), "--stages", std::to_string(stages), "--port", port,
                     "--schedule", schedule, "--microbatches", std::to_string(microbatches), "--virtual-stages",
                     std::to_string(chunks), "--width",
                     std::to_string(width), "--steps", std::to_string(steps), "--warmup", std::to_string(warmup),
                     "--out", (dir / ("stage" + std::to_string(r))).string()});
  }
  volt::bench::run_processes(argvs, {}, "pipeline_bubble");
  std::vector<StageFigures> figures(static_cast<size_t>(stages));
  for (int64_t r = 0; r < stages; ++r) {
    std::ifstream in(dir / ("stage" + std::to_string(r)));
    auto& f = figures[static_cast<size_t>(r)];
    in >> f.idle >> f.ms >> f.peak_mib >> f.held;
  }
  std::filesystem::remove_all(dir);
  return figures;
}

}  // namespace

int main(int argc, char** argv) {
  po::options_description flags("pipeline_bubble");
  flags.add_options()("help", "this text")("stages", po::value<int64_t>()->default_value(4),
                                           "pipeline stages (processes)")(
      "microbatches", po::value<std::string>()->default_value("4,8,16"), "micro-batch counts, comma-separated")(
      "virtual-stages", po::value<int64_t>()->default_value(2), "chunks a rank under interleaved 1F1B")(
      "width", po::value<int64_t>()->default_value(1024), "the blocks' width")(
      "steps", po::value<int>()->default_value(5), "timed steps")("warmup", po::value<int>()->default_value(2),
                                                                  "untimed steps")(
      "worker-rank", po::value<int64_t>()->default_value(-1), "internal: run this stage")(
      "port", po::value<int64_t>()->default_value(0), "internal")(
      "schedule", po::value<std::string>()->default_value("gpipe"), "internal: the worker's schedule")(
      "out", po::value<std::string>()->default_value(""), "internal: where the worker writes its figures");
  po::variables_map vm;
  po::store(po::parse_command_line(argc, argv, flags), vm);
  if (vm.count("help")) {
    std::cout << flags;
    return 0;
  }
  const int64_t stages = vm["stages"].as<int64_t>(), width = vm["width"].as<int64_t>();
  const int steps = vm["steps"].as<int>(), warmup = vm["warmup"].as<int>();
  if (vm["worker-rank"].as<int64_t>() >= 0) {
    return run_stage(vm["worker-rank"].as<int64_t>(), stages, vm["port"].as<int64_t>(),
                     vm["schedule"].as<std::string>(), std::stoll(vm["microbatches"].as<std::string>()),
                     vm["virtual-stages"].as<int64_t>(), width, steps, warmup, vm["out"].as<std::string>());
  }
  const auto self = volt::bench::self_path("pipeline_bubble");
  std::printf(
      "pipeline stages as processes on one host, 1 thread each, %lld stages of %lld blocks Linear(%lld, %lld) + "
      "Tanh, micro-batches of %lld rows, %d timed steps (+%d warm-up), medians; idle = 1 - compute / step\n\n"
      "| schedule | M | formula | idle (mean of stages) | vs formula | ms/step |",
      static_cast<long long>(stages), static_cast<long long>(kBlocks / stages), static_cast<long long>(width),
      static_cast<long long>(width), static_cast<long long>(kRows), steps, warmup);
  for (int64_t s = 0; s < stages; ++s) std::printf(" stage %lld: idle, held, peak MiB |", static_cast<long long>(s));
  std::printf("\n|---|---|---|---|---|---|");
  for (int64_t s = 0; s < stages; ++s) std::printf("---|");
  std::printf("\n");
  const int64_t virtual_stages = vm["virtual-stages"].as<int64_t>();
  for (const auto& schedule : {std::string("gpipe"), std::string("1f1b"), std::string("interleaved_1f1b")}) {
    const int64_t chunks = schedule == "interleaved_1f1b" ? virtual_stages : 1;
    for (const auto& m_text : volt::bench::split_list(vm["microbatches"].as<std::string>())) {
      const int64_t m = std::stoll(m_text);
      const auto figures = run_pipeline(self, stages, schedule, m, chunks, width, steps, warmup);
      double idle = 0, ms = 0;
      for (const auto& f : figures) {
        idle += f.idle / static_cast<double>(stages);
        ms = std::max(ms, f.ms);
      }
      const double formula = volt::pipeline::bubble_formula(stages, m, chunks);
      const std::string name = chunks > 1 ? schedule + " (V=" + std::to_string(chunks) + ")" : schedule;
      std::printf("| %s | %lld | %.3f | %.3f | %.2fx | %.1f |", name.c_str(), static_cast<long long>(m), formula, idle,
                  idle / formula, ms);
      for (const auto& f : figures)
        std::printf(" %.3f, %lld, %.2f |", f.idle, static_cast<long long>(f.held), f.peak_mib);
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  return 0;
}

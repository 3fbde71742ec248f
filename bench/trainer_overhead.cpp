// What the Trainer costs over a hand-written LibTorch loop: the same model, in-memory data,
// optimizer, LR schedule and number of steps, once through Trainer::fit (progress bar,
// checkpointing, logging and validation off) and once as a plain loop; repetitions interleaved,
// medians compared. Prints a table of volt/raw per model; the target is <= 1.03.
//
// Wall time is what a user waits for; process CPU time (user + system, all threads) is printed beside
// it because on a shared machine it moves far less with other jobs' load than wall time does. With
// --threads 1 both sides run single-threaded, which makes the CPU-time ratio robust on a busy machine.
//
//   build/bench/trainer_overhead [--repetitions 7] [--mlp-steps 300] [--cnn-steps 20] [--threads 0]
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include <time.h>

#include <boost/program_options.hpp>

#include "bench/bench_support.h"
#include "fashion_mnist/classifier.h"
#include "core/cpu_threads.h"
#include "core/malloc_tuning.h"
#include "trainer/run_main.h"
#include "trainer/volt.h"

namespace {

constexpr int64_t kBatch = 128;

// The MLP of the issue: 784-128-10, SGD with momentum.
class Mlp : public volt::Module {
 public:
  Mlp() {
    net_ = register_module("net", torch::nn::Sequential(torch::nn::Linear(784, 128), torch::nn::ReLU(),
                                                        torch::nn::Linear(128, 10)));
  }
  torch::Tensor forward(const torch::Tensor& x) { return net_->forward(x); }
  torch::Tensor training_step(const volt::Batch& batch, int64_t) override {
    auto loss = torch::nn::functional::cross_entropy(forward(batch.input), batch.target);
    log("train_loss", loss, {.prog_bar = true});
    return loss;
  }
  volt::OptimizerConfig configure_optimizers() override { return make_optimizer(parameters()); }
  static std::shared_ptr<torch::optim::Optimizer> make_optimizer(std::vector<torch::Tensor> params) {
    return std::make_shared<torch::optim::SGD>(params, torch::optim::SGDOptions(0.01).momentum(0.9));
  }

 private:
  torch::nn::Sequential net_{nullptr};
};

// Wall and process CPU seconds of one run.
struct Times {
  double wall = 0;
  double cpu = 0;
};

double process_cpu_seconds() {
  timespec now{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

class Stopwatch {
 public:
  Times elapsed() const {
    return {std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start_).count(),
            process_cpu_seconds() - cpu_start_};
  }

 private:
  std::chrono::steady_clock::time_point wall_start_ = std::chrono::steady_clock::now();
  double cpu_start_ = process_cpu_seconds();
};

using volt::bench::median;

std::shared_ptr<volt::DataLoader> make_loader(std::vector<int64_t> input_shape, int64_t steps) {
  auto generator = at::detail::createCPUGenerator(0);
  input_shape.insert(input_shape.begin(), steps * kBatch);
  auto x = torch::randn(input_shape, generator);
  auto y = torch::randint(10, {steps * kBatch}, generator);
  return std::make_shared<volt::DataLoader>(std::make_shared<volt::TensorDataset>(x, y),
                                            volt::DataLoaderOptions{.batch_size = kBatch});
}

Times time_volt(const std::shared_ptr<volt::Module>& model, const std::shared_ptr<volt::DataLoader>& data,
                int64_t steps, int64_t threads) {
  volt::TrainerOptions options;
  options.threads = threads;
  options.max_epochs = 1;
  options.max_steps = steps;
  options.loggers.clear();
  options.enable_progress_bar = false;
  options.enable_checkpointing = false;
  options.enable_model_summary = false;
  options.num_sanity_val_steps = 0;
  options.default_root_dir = "/tmp";
  const Stopwatch stopwatch;
  volt::Trainer trainer(options);
  trainer.fit(model, data);
  return stopwatch.elapsed();
}

// The hand-written loop: what a LibTorch user writes without a framework.
template <typename Model, typename MakeOptimizer, typename MakeScheduler, typename Step>
Times time_raw(Model& model, volt::DataLoader& data, int64_t steps, MakeOptimizer make_optimizer,
               MakeScheduler make_scheduler, Step step) {
  const Stopwatch stopwatch;
  auto optimizer = make_optimizer(model.parameters());
  auto scheduler = make_scheduler(*optimizer, steps);
  model.train();
  for (int64_t i = 0; i < steps; ++i) {
    const auto batch = data.batch(i);
    auto loss = step(model, batch);
    loss.backward();
    optimizer->step();
    if (scheduler) scheduler->step();
    optimizer->zero_grad();
  }
  return stopwatch.elapsed();
}

struct Row {
  std::string model;
  int64_t steps;
  Times volt;  // medians
  Times raw;
};

// Medians of each column of interleaved runs.
struct Samples {
  std::vector<double> volt_wall, volt_cpu, raw_wall, raw_cpu;
  void add(Times volt, Times raw) {
    volt_wall.push_back(volt.wall);
    volt_cpu.push_back(volt.cpu);
    raw_wall.push_back(raw.wall);
    raw_cpu.push_back(raw.cpu);
  }
  Row row(std::string model, int64_t steps) const {
    return {std::move(model), steps, {median(volt_wall), median(volt_cpu)}, {median(raw_wall), median(raw_cpu)}};
  }
};

}  // namespace

int main(int argc, char** argv) {
  return volt::run_main([&] {
    namespace po = boost::program_options;
    int64_t repetitions = 7, mlp_steps = 300, cnn_steps = 20, threads_flag = 0;
    po::options_description flags("trainer_overhead");
    flags.add_options()("repetitions", po::value(&repetitions)->default_value(repetitions), "interleaved pairs")
        ("mlp-steps", po::value(&mlp_steps)->default_value(mlp_steps), "steps per MLP run")
        ("cnn-steps", po::value(&cnn_steps)->default_value(cnn_steps), "steps per CNN run")
        ("threads", po::value(&threads_flag)->default_value(threads_flag),
         "intra-op threads for both sides (0: what the Trainer picks for one process)")
        ("help", "this text");
    if (!volt::bench::parse_flags(argc, argv, flags)) return;
    // The Trainer keeps freed memory in glibc's heap (malloc_tuning, on by default); this process
    // setting would otherwise carry over from the first volt run into the raw loop at a random point.
    // Both sides run under it from the start, so the table compares the training loops alone
    // (the allocator's own effect is in docs/cpu_threads.md, "Memory allocator").
    volt::keep_freed_memory_in_heap();

    // Both sides run with the thread settings the Trainer picks for one process, or --threads
    // (handed to the Trainer as its own --threads).
    const auto threads = volt::configure_cpu_threads({.threads = threads_flag});

    std::vector<Row> rows;
    {
      auto data = make_loader({784}, mlp_steps);
      Samples samples;
      for (int64_t r = 0; r < repetitions; ++r) {
        torch::manual_seed(r);
        const Times volt = time_volt(std::make_shared<Mlp>(), data, mlp_steps, threads_flag);
        torch::manual_seed(r);
        Mlp raw;
        samples.add(volt, time_raw(
                              raw, *data, mlp_steps, Mlp::make_optimizer,
                              [](torch::optim::Optimizer&, int64_t) { return std::shared_ptr<volt::LRScheduler>(); },
                              [](Mlp& m, const volt::Batch& b) {
                                return torch::nn::functional::cross_entropy(m.forward(b.input), b.target);
                              }));
      }
      rows.push_back(samples.row("MLP 784-128-10, SGD", mlp_steps));
    }
    {
      auto data = make_loader({1, 28, 28}, cnn_steps);
      Samples samples;
      fashion_mnist::ClassifierOptions options;
      for (int64_t r = 0; r < repetitions; ++r) {
        torch::manual_seed(r);
        const Times volt =
            time_volt(std::make_shared<fashion_mnist::Classifier>(options), data, cnn_steps, threads_flag);
        torch::manual_seed(r);
        fashion_mnist::Classifier raw(options);
        samples.add(volt, time_raw(
                              raw, *data, cnn_steps,
                              [&](std::vector<torch::Tensor> params) {
                                return std::make_shared<torch::optim::AdamW>(
                                    params, torch::optim::AdamWOptions(options.lr).weight_decay(options.weight_decay));
                              },
                              [](torch::optim::Optimizer& o, int64_t steps) {
                                return std::make_shared<volt::CosineAnnealingLR>(o, steps);
                              },
                              // The same quantities the Classifier's training_step computes (loss and accuracy).
                              [](fashion_mnist::Classifier& m, const volt::Batch& b) {
                                const auto logits = m.forward(b.input);
                                const auto accuracy = (logits.argmax(1) == b.target).to(torch::kFloat).mean();
                                (void)accuracy;
                                return torch::nn::functional::cross_entropy(logits, b.target);
                              }));
      }
      rows.push_back(samples.row("Example CNN (Fashion-MNIST), AdamW + cosine", cnn_steps));
    }

    std::printf("trainer_overhead: batch %lld, %lld interleaved repetitions, %s, medians\n\n",
                static_cast<long long>(kBatch), static_cast<long long>(repetitions), threads.describe().c_str());
    std::printf(
        "| model | steps | volt wall (s) | raw wall (s) | volt/raw wall | volt CPU (s) | raw CPU (s) | volt/raw CPU |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for (const auto& row : rows) {
      std::printf("| %s | %lld | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f |\n", row.model.c_str(),
                  static_cast<long long>(row.steps), row.volt.wall, row.raw.wall, row.volt.wall / row.raw.wall,
                  row.volt.cpu, row.raw.cpu, row.volt.cpu / row.raw.cpu);
    }
  });
}

// Volt's CPU thread policy (core/cpu_threads.h) against the settings it replaced and the
// alternatives, on the models of issue 19: the 784-128-10 MLP, the example CNN, and an MLP of large
// layers (the case the policy gives up, see below). Each setting trains the same model from the
// same weights with a hand-written loop (the Trainer's own cost is bench/trainer_overhead's
// subject); settings are interleaved within each repetition and medians compared. The "volt
// default" column is what configure_cpu_threads gives one process without flags, as the Trainer
// calls it; the last column is that time over the faster of "1 thread" and "N + N" (the two
// settings issue 19 compared), <= 1 meaning the default gets the model its faster one.
//
//   build/bench/cpu_threads [--repetitions 5] [--mlp-steps 300] [--cnn-steps 20] [--large-mlp-steps 30]
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <boost/program_options.hpp>

#include "bench/bench_support.h"
#include "bench/mlp.h"
#include "core/cpu_threads.h"
#include "core/malloc_tuning.h"
#include "fashion_mnist/classifier.h"
#include "trainer/run_main.h"

namespace {

constexpr int64_t kBatch = 128;
constexpr int64_t kWarmupSteps = 3;  // after a thread-count change the pools start their threads

struct Setting {
  std::string name;
  int64_t intra_op;
  int64_t blas;
};

// One training step of a model on a fixed batch (the batch's content does not change the time).
using Step = std::function<void()>;

struct Workload {
  std::string model;
  int64_t steps;
  Step step;
};

Step train_step(std::shared_ptr<torch::nn::Module> model, std::shared_ptr<torch::optim::Optimizer> optimizer,
                std::function<torch::Tensor(const torch::Tensor&)> forward, torch::Tensor x, torch::Tensor y) {
  model->train();
  return [model, optimizer, forward, x, y] {
    auto loss = torch::nn::functional::cross_entropy(forward(x), y);
    loss.backward();
    optimizer->step();
    optimizer->zero_grad();
  };
}

Workload mlp(const std::string& widths, int64_t steps) {
  torch::manual_seed(0);
  auto net = volt::bench::make_mlp(widths);
  auto optimizer = std::make_shared<torch::optim::SGD>(net->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  const int64_t in = volt::bench::parse_widths(widths).front();
  return {"MLP " + widths + ", SGD", steps,
          train_step(net.ptr(), optimizer, [net](const torch::Tensor& x) mutable { return net->forward(x); },
                     torch::randn({kBatch, in}), torch::randint(10, {kBatch}))};
}

Workload cnn(int64_t steps) {
  torch::manual_seed(0);
  fashion_mnist::ClassifierOptions options;
  auto net = std::make_shared<fashion_mnist::Classifier>(options);
  auto optimizer = std::make_shared<torch::optim::AdamW>(
      net->parameters(), torch::optim::AdamWOptions(options.lr).weight_decay(options.weight_decay));
  return {"Example CNN (Fashion-MNIST), AdamW", steps,
          train_step(net, optimizer, [net](const torch::Tensor& x) { return net->forward(x); },
                     torch::randn({kBatch, 1, 28, 28}), torch::randint(10, {kBatch}))};
}

double seconds_for(const Workload& workload, const Setting& setting) {
  volt::set_cpu_threads(setting.intra_op, setting.blas);
  for (int64_t i = 0; i < kWarmupSteps; ++i) workload.step();
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < workload.steps; ++i) workload.step();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  return volt::run_main([&] {
    namespace po = boost::program_options;
    int64_t repetitions = 5, mlp_steps = 300, cnn_steps = 20, large_mlp_steps = 30;
    po::options_description flags("cpu_threads");
    flags.add_options()("repetitions", po::value(&repetitions)->default_value(repetitions), "interleaved rounds")
        ("mlp-steps", po::value(&mlp_steps)->default_value(mlp_steps), "timed steps per MLP run")
        ("cnn-steps", po::value(&cnn_steps)->default_value(cnn_steps), "timed steps per CNN run")
        ("large-mlp-steps", po::value(&large_mlp_steps)->default_value(large_mlp_steps),
         "timed steps per large-MLP run")
        ("help", "this text");
    if (!volt::bench::parse_flags(argc, argv, flags)) return;
    volt::keep_freed_memory_in_heap();  // as the Trainer runs

    const auto policy = volt::configure_cpu_threads({});
    const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
    const std::vector<Setting> settings{
        {"volt default", policy.intra_op, policy.blas},
        {"1 thread", 1, 1},
        {std::to_string(cores) + " + " + std::to_string(cores) + " (old default)", cores, cores},
        {"1 + " + std::to_string(cores) + " BLAS", 1, cores},
    };
    const std::vector<Workload> workloads{mlp("784,128,10", mlp_steps), cnn(cnn_steps),
                                          mlp("1024,2048,2048,10", large_mlp_steps)};

    std::printf("cpu_threads: %lld cores, batch %lld, %lld interleaved repetitions, medians (s); settings are "
                "intra-op + OpenBLAS threads; volt default: %s\n\n",
                static_cast<long long>(cores), static_cast<long long>(kBatch), static_cast<long long>(repetitions),
                policy.describe().c_str());
    std::printf("| model | steps |");
    for (const auto& setting : settings) std::printf(" %s |", setting.name.c_str());
    std::printf(" default / faster of 1 and %lld + %lld |\n|---|---:|", static_cast<long long>(cores),
                static_cast<long long>(cores));
    for (size_t i = 0; i <= settings.size(); ++i) std::printf("---:|");
    std::printf("\n");
    for (const auto& workload : workloads) {
      std::vector<std::vector<double>> samples(settings.size());
      for (int64_t r = 0; r < repetitions; ++r) {
        for (size_t s = 0; s < settings.size(); ++s) samples[s].push_back(seconds_for(workload, settings[s]));
      }
      std::vector<double> medians;
      for (const auto& s : samples) medians.push_back(volt::bench::median(s));
      std::printf("| %s | %lld |", workload.model.c_str(), static_cast<long long>(workload.steps));
      for (double m : medians) std::printf(" %.3f |", m);
      std::printf(" **%.2f** |\n", medians[0] / std::min(medians[1], medians[2]));
    }
    volt::configure_cpu_threads({});
  });
}

// What callbacks and loggers cost per training step: the same MLP fit (in-memory data, SGD,
// validation off) with nothing attached, then with each logger writing every step
// (log_every_n_steps 1, the worst case), then with every built-in callback that acts per step.
// Repetitions are interleaved and medians compared against the bare fit measured in the same run.
//
//   build/bench/logging_overhead [--repetitions 7] [--steps 400]
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "bench/bench_support.h"
#include "core/cpu_threads.h"
#include "trainer/run_main.h"
#include "trainer/volt.h"

namespace {

constexpr int64_t kBatch = 128;

class Mlp : public volt::Module {
 public:
  Mlp() {
    net_ = register_module("net", torch::nn::Sequential(torch::nn::Linear(784, 128), torch::nn::ReLU(),
                                                        torch::nn::Linear(128, 10)));
  }
  torch::Tensor training_step(const volt::Batch& batch, int64_t) override {
    const auto logits = net_->forward(batch.input);
    auto loss = torch::nn::functional::cross_entropy(logits, batch.target);
    log("train_loss", loss, {.prog_bar = true});
    log("train_acc", (logits.argmax(1) == batch.target).to(torch::kFloat).mean());
    return loss;
  }
  volt::OptimizerConfig configure_optimizers() override {
    auto sgd = std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
    return {sgd, {std::make_shared<volt::StepLR>(*sgd, 100, 0.5), volt::SchedulerInterval::Step}};
  }

 private:
  torch::nn::Sequential net_{nullptr};
};

struct Setup {
  std::string name;
  std::vector<std::string> loggers;
  std::vector<std::string> callbacks;
};

double time_fit(const Setup& setup, const std::shared_ptr<volt::DataLoader>& data, int64_t steps,
                const std::string& root) {
  volt::TrainerOptions options;
  options.max_epochs = 1;
  options.max_steps = steps;
  options.log_every_n_steps = 1;
  options.loggers = setup.loggers;
  options.callbacks = setup.callbacks;
  options.enable_progress_bar = false;
  options.enable_checkpointing = false;
  options.enable_model_summary = false;
  options.num_sanity_val_steps = 0;
  options.default_root_dir = root;
  torch::manual_seed(0);
  auto model = std::make_shared<Mlp>();
  const auto start = std::chrono::steady_clock::now();
  {
    volt::Trainer trainer(options);
    trainer.fit(model, data);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

using volt::bench::median;

}  // namespace

int main(int argc, char** argv) {
  return volt::run_main([&] {
    namespace po = boost::program_options;
    int64_t repetitions = 7, steps = 400;
    po::options_description flags("logging_overhead");
    flags.add_options()("repetitions", po::value(&repetitions)->default_value(repetitions), "interleaved rounds")
        ("steps", po::value(&steps)->default_value(steps), "optimizer steps per fit")
        ("help", "this text");
    if (!volt::bench::parse_flags(argc, argv, flags)) return;
    const int64_t threads = volt::configure_cpu_threads({}).intra_op;
    auto generator = at::detail::createCPUGenerator(0);
    auto data = std::make_shared<volt::DataLoader>(
        std::make_shared<volt::TensorDataset>(torch::randn({steps * kBatch, 784}, generator),
                                              torch::randint(10, {steps * kBatch}, generator)),
        volt::DataLoaderOptions{.batch_size = kBatch});
    const std::string root = (std::filesystem::temp_directory_path() / "volt_logging_overhead").string();

    const std::vector<Setup> setups{
        {"nothing attached (baseline)", {}, {}},
        {"csv logger", {"csv"}, {}},
        {"tensorboard logger", {"tensorboard"}, {}},
        {"tensorboard + weight histograms every epoch", {"tensorboard:histogram_every_n_epochs=1"}, {}},
        {"csv + tensorboard + lr monitor + EMA + timer + early stopping",
         {"csv", "tensorboard"},
         {"learning_rate_monitor", "ema:decay=0.999", "timer:duration=01:00:00:00",
          "early_stopping:monitor=train_loss,patience=1000"}},
    };
    std::vector<std::vector<double>> times(setups.size());
    for (int64_t r = 0; r < repetitions; ++r) {
      for (size_t i = 0; i < setups.size(); ++i) {
        std::filesystem::remove_all(root);
        times[i].push_back(time_fit(setups[i], data, steps, root));
      }
    }
    std::filesystem::remove_all(root);

    std::printf("logging_overhead: MLP 784-128-10, batch %lld, %lld steps logged every step, %lld interleaved "
                "repetitions, %lld intra-op threads, medians\n\n",
                static_cast<long long>(kBatch), static_cast<long long>(steps), static_cast<long long>(repetitions),
                static_cast<long long>(threads));
    std::printf("| attached | fit (s) | per step (ms) | vs baseline |\n|---|---:|---:|---:|\n");
    const double baseline = median(times[0]);
    for (size_t i = 0; i < setups.size(); ++i) {
      const double m = median(times[i]);
      std::printf("| %s | %.3f | %.3f | %.3f |\n", setups[i].name.c_str(), m, 1e3 * m / static_cast<double>(steps),
                  m / baseline);
    }
  });
}

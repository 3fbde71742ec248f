// What the Trainer costs over a hand-written LibTorch loop: the same model, in-memory data,
// optimizer, LR schedule and number of steps, once through Trainer::fit (progress bar,
// checkpointing, logging and validation off) and once as a plain loop; repetitions interleaved,
// medians compared. Prints a table of volt/raw per model; the target is <= 1.03.
//
//   build/bench/trainer_overhead [--repetitions 7] [--mlp-steps 300] [--cnn-steps 20]
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "fashion_mnist/classifier.h"
#include "trainer/cpu_threads.h"
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

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

std::shared_ptr<volt::DataLoader> make_loader(std::vector<int64_t> input_shape, int64_t steps) {
  auto generator = at::detail::createCPUGenerator(0);
  input_shape.insert(input_shape.begin(), steps * kBatch);
  auto x = torch::randn(input_shape, generator);
  auto y = torch::randint(10, {steps * kBatch}, generator);
  return std::make_shared<volt::DataLoader>(std::make_shared<volt::TensorDataset>(x, y),
                                            volt::DataLoaderOptions{.batch_size = kBatch});
}

double time_volt(const std::shared_ptr<volt::Module>& model, const std::shared_ptr<volt::DataLoader>& data,
                 int64_t steps) {
  volt::TrainerOptions options;
  options.max_epochs = 1;
  options.max_steps = steps;
  options.loggers.clear();
  options.enable_progress_bar = false;
  options.enable_checkpointing = false;
  options.enable_model_summary = false;
  options.num_sanity_val_steps = 0;
  options.default_root_dir = "/tmp";
  const auto start = std::chrono::steady_clock::now();
  volt::Trainer trainer(options);
  trainer.fit(model, data);
  return seconds_since(start);
}

// The hand-written loop: what a LibTorch user writes without a framework.
template <typename Model, typename MakeOptimizer, typename MakeScheduler, typename Step>
double time_raw(Model& model, const volt::DataLoader& data, int64_t steps, MakeOptimizer make_optimizer,
                MakeScheduler make_scheduler, Step step) {
  const auto start = std::chrono::steady_clock::now();
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
  return seconds_since(start);
}

struct Row {
  std::string model;
  int64_t steps;
  double volt_s;
  double raw_s;
};

}  // namespace

int main(int argc, char** argv) {
  return volt::run_main([&] {
    namespace po = boost::program_options;
    int64_t repetitions = 7, mlp_steps = 300, cnn_steps = 20;
    po::options_description flags("trainer_overhead");
    flags.add_options()("repetitions", po::value(&repetitions)->default_value(repetitions), "interleaved pairs")
        ("mlp-steps", po::value(&mlp_steps)->default_value(mlp_steps), "steps per MLP run")
        ("cnn-steps", po::value(&cnn_steps)->default_value(cnn_steps), "steps per CNN run")
        ("help", "this text");
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, flags), vm);
    po::notify(vm);
    if (vm.count("help")) {
      std::cout << flags;
      return;
    }
    // Both sides run with the thread settings the Trainer picks for one process.
    const int64_t threads = volt::configure_cpu_threads(1);

    std::vector<Row> rows;
    {
      auto data = make_loader({784}, mlp_steps);
      std::vector<double> volt_times, raw_times;
      for (int64_t r = 0; r < repetitions; ++r) {
        torch::manual_seed(r);
        volt_times.push_back(time_volt(std::make_shared<Mlp>(), data, mlp_steps));
        torch::manual_seed(r);
        Mlp raw;
        raw_times.push_back(time_raw(
            raw, *data, mlp_steps, Mlp::make_optimizer,
            [](torch::optim::Optimizer&, int64_t) { return std::shared_ptr<volt::LRScheduler>(); },
            [](Mlp& m, const volt::Batch& b) { return torch::nn::functional::cross_entropy(m.forward(b.input), b.target); }));
      }
      rows.push_back({"MLP 784-128-10, SGD", mlp_steps, median(volt_times), median(raw_times)});
    }
    {
      auto data = make_loader({1, 28, 28}, cnn_steps);
      std::vector<double> volt_times, raw_times;
      fashion_mnist::ClassifierOptions options;
      for (int64_t r = 0; r < repetitions; ++r) {
        torch::manual_seed(r);
        volt_times.push_back(time_volt(std::make_shared<fashion_mnist::Classifier>(options), data, cnn_steps));
        torch::manual_seed(r);
        fashion_mnist::Classifier raw(options);
        raw_times.push_back(time_raw(
            raw, *data, cnn_steps,
            [&](std::vector<torch::Tensor> params) {
              return std::make_shared<torch::optim::AdamW>(
                  params, torch::optim::AdamWOptions(options.lr).weight_decay(options.weight_decay));
            },
            [](torch::optim::Optimizer& o, int64_t steps) { return std::make_shared<volt::CosineAnnealingLR>(o, steps); },
            // The same quantities the Classifier's training_step computes (loss and accuracy).
            [](fashion_mnist::Classifier& m, const volt::Batch& b) {
              const auto logits = m.forward(b.input);
              const auto accuracy = (logits.argmax(1) == b.target).to(torch::kFloat).mean();
              (void)accuracy;
              return torch::nn::functional::cross_entropy(logits, b.target);
            }));
      }
      rows.push_back({"Example CNN (Fashion-MNIST), AdamW + cosine", cnn_steps, median(volt_times), median(raw_times)});
    }

    std::printf("trainer_overhead: batch %lld, %lld interleaved repetitions, %lld intra-op threads, medians\n\n",
                static_cast<long long>(kBatch), static_cast<long long>(repetitions), static_cast<long long>(threads));
    std::printf("| model | steps | volt (s) | raw LibTorch (s) | volt/raw |\n|---|---:|---:|---:|---:|\n");
    for (const auto& row : rows) {
      std::printf("| %s | %lld | %.3f | %.3f | %.3f |\n", row.model.c_str(), static_cast<long long>(row.steps),
                  row.volt_s, row.raw_s, row.volt_s / row.raw_s);
    }
  });
}

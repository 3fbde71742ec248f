// Training-step time of the example CNN (Fashion-MNIST shapes, AdamW + cosine, batch 128) under
// each precision, against 32-true measured in the same run: repetitions interleaved (one run of
// every precision per repetition), per-step times taken after warm-up steps, medians compared.
// On CPU: 32-true, bf16-mixed, bf16-mixed with a GradScaler (the 16-mixed pipeline: scaled loss,
// CPU unscale and inf check, scale update), bf16-true. With a CUDA device (LibTorch built with
// CUDA): the same model on the GPU with 32-true, bf16-mixed and 16-mixed.
//
//   build/bench/precision_bench [--repetitions 5] [--steps 30] [--warmup 5] [--batch-size 128]
#include <torch/torch.h>

#include <boost/program_options.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "bench/bench_support.h"
#include "fashion_mnist/classifier.h"
#include "core/cpu_threads.h"
#include "precision/mixed_precision.h"
#include "trainer/run_main.h"
#include "trainer/volt.h"

namespace {

// Seconds per training step after `warmup` steps: from the end of the warm-up batch to the end
// of the last one, so that setup and first-call costs (allocator, oneDNN kernels) stay out.
class StepTimer : public volt::Callback {
 public:
  explicit StepTimer(int64_t warmup) : warmup_(warmup) {}
  void on_train_batch_end(volt::Trainer& trainer, volt::Module&, const torch::Tensor&, const volt::Batch&,
                          int64_t batch_idx) override {
    if (trainer.strategy().root_device().is_cuda()) torch::cuda::synchronize();
    const auto now = std::chrono::steady_clock::now();
    if (batch_idx + 1 == warmup_) start_ = now;
    if (batch_idx + 1 > warmup_) {
      end_ = now;
      ++timed_;
    }
  }
  double seconds_per_step() const { return std::chrono::duration<double>(end_ - start_).count() / timed_; }

 private:
  int64_t warmup_;
  int64_t timed_ = 0;
  std::chrono::steady_clock::time_point start_, end_;
};

using volt::bench::median;

struct Config {
  std::string label;
  std::string device;     // "cpu" or "cuda"
  std::string precision;  // TrainerOptions::precision
  bool cpu_scaler = false;  // bf16-mixed with a GradScaler, built in code
  std::vector<double> times;
};

double time_one(const Config& config, const std::shared_ptr<volt::DataLoader>& data, int64_t steps, int64_t warmup) {
  volt::TrainerOptions options;
  options.max_epochs = 1;
  options.max_steps = steps;
  options.accelerator = config.device;
  options.precision = config.precision;
  options.loggers.clear();
  options.enable_progress_bar = false;
  options.enable_checkpointing = false;
  options.enable_model_summary = false;
  options.num_sanity_val_steps = 0;
  options.default_root_dir = "/tmp";
  std::shared_ptr<volt::Precision> precision;
  if (config.cpu_scaler) {
    precision =
        std::make_shared<volt::MixedPrecision>(torch::kBFloat16, torch::kCPU, std::make_shared<volt::GradScaler>());
  }
  auto trainer = precision ? std::make_unique<volt::Trainer>(options, nullptr, precision)
                           : std::make_unique<volt::Trainer>(options);
  auto timer = std::make_shared<StepTimer>(warmup);
  trainer->add_callback(timer);
  trainer->fit(std::make_shared<fashion_mnist::Classifier>(), data);
  return timer->seconds_per_step();
}

}  // namespace

int main(int argc, char** argv) {
  return volt::run_main([&] {
    namespace po = boost::program_options;
    int64_t repetitions = 5, steps = 30, warmup = 5, batch_size = 128;
    po::options_description flags("precision_bench");
    flags.add_options()("repetitions", po::value(&repetitions)->default_value(repetitions), "interleaved rounds")
        ("steps", po::value(&steps)->default_value(steps), "training steps per run")
        ("warmup", po::value(&warmup)->default_value(warmup), "untimed steps at the start of each run")
        ("batch-size", po::value(&batch_size)->default_value(batch_size), "images per step")
        ("help", "this text");
    if (!volt::bench::parse_flags(argc, argv, flags)) return;
    volt::check<volt::ConfigurationError>(steps > warmup && warmup >= 1,
                                          "precision_bench: expected --steps > --warmup >= 1, got steps ", steps,
                                          ", warmup ", warmup);
    const int64_t threads = volt::configure_cpu_threads({}).intra_op;

    auto generator = at::detail::createCPUGenerator(0);
    auto x = torch::randn({steps * batch_size, 1, 28, 28}, generator);
    auto y = torch::randint(10, {steps * batch_size}, generator);
    auto data = std::make_shared<volt::DataLoader>(std::make_shared<volt::TensorDataset>(x, y),
                                                   volt::DataLoaderOptions{.batch_size = batch_size});

    std::vector<Config> configs{{"CPU 32-true (baseline)", "cpu", "32-true"},
                                {"CPU bf16-mixed", "cpu", "bf16-mixed"},
                                {"CPU bf16-mixed + GradScaler", "cpu", "bf16-mixed", true},
                                {"CPU bf16-true", "cpu", "bf16-true"}};
    const bool cuda = torch::cuda::is_available();
    if (cuda) {
      configs.push_back({"CUDA 32-true (baseline)", "cuda", "32-true"});
      configs.push_back({"CUDA bf16-mixed", "cuda", "bf16-mixed"});
      configs.push_back({"CUDA 16-mixed", "cuda", "16-mixed"});
    }
    for (int64_t r = 0; r < repetitions; ++r) {
      for (auto& config : configs) {
        torch::manual_seed(r);
        config.times.push_back(time_one(config, data, steps, warmup));
      }
    }

    std::printf("precision_bench: example CNN, batch %lld, %lld timed steps per run (after %lld warm-up), "
                "%lld interleaved repetitions, %lld intra-op threads, medians%s\n\n",
                static_cast<long long>(batch_size), static_cast<long long>(steps - warmup),
                static_cast<long long>(warmup), static_cast<long long>(repetitions),
                static_cast<long long>(threads), cuda ? "" : "; no CUDA device: CPU rows only");
    std::printf("| precision | ms/step (median) | min | max | vs 32-true |\n|---|---:|---:|---:|---:|\n");
    double baseline = 0;
    for (const auto& config : configs) {
      const double m = median(config.times);
      if (config.precision == "32-true") baseline = m;
      const auto [lo, hi] = std::minmax_element(config.times.begin(), config.times.end());
      std::printf("| %s | %.1f | %.1f | %.1f | %.3f |\n", config.label.c_str(), 1e3 * m, 1e3 * *lo, 1e3 * *hi,
                  m / baseline);
    }
  });
}

// Activation checkpointing (volt::checkpoint) on the GPT example's decoder, against the same
// model keeping its activations, measured in the same run with their steps alternating: the bytes
// a forward leaves saved for the backward, the peak of a forward and backward above the weights,
// and the step time. Bytes come from LibTorch's CPU allocator, counted (bench/counting_allocator.h),
// or on CUDA from the caching allocator's counters (core/device_memory.h). On CUDA the step runs
// under bf16 autocast.
//
//   build/bench/activation_checkpointing [--preset cpu] [--batch 32] [--layers 8] [--steps 20]
//   build/bench/activation_checkpointing --device cuda --preset gpt2 --batch 8 --layers 12
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/bench_support.h"
#include "bench/counting_allocator.h"
#include "bench/step_clock.h"  // synchronize
#include "core/device_memory.h"
#include "gpt/gpt_model.h"
#include "precision/autocast.h"

namespace {

struct Measured {
  double saved_mib = 0, peak_mib = 0, step_ms = 0, forward_ms = 0;
  double loss = 0;
};

constexpr double kMiB = 1024.0 * 1024.0;

// Live and peak bytes of the device the step runs on.
struct MemoryCounter {
  torch::Device device;
  int64_t live() const {
    return device.is_cuda() ? volt::allocated_bytes(device).value()
                            : volt::bench::CountingCPUAllocator::install().live();
  }
  int64_t peak() const {
    return device.is_cuda() ? volt::peak_allocated_bytes(device).value()
                            : volt::bench::CountingCPUAllocator::install().peak();
  }
  void reset_peak() const {
    if (device.is_cuda()) {
      volt::reset_peak_allocated_bytes(device);
    } else {
      volt::bench::CountingCPUAllocator::install().reset_peak();
    }
  }
};

// One model's steps: each call runs and measures one (forward, loss, backward).
class Runner {
 public:
  Runner(const gpt::GPTConfig& config, int64_t batch, const torch::Device& device)
      : config_(config), device_(device), counter_{device} {
    torch::manual_seed(0);
    model_ = gpt::GPT(config);
    model_->to(device);
    model_->train();
    torch::manual_seed(2);
    const auto tokens = torch::randint(config.vocab_size, {batch, config.block_size + 1}, torch::kLong).to(device);
    input_ = tokens.narrow(1, 0, config.block_size);
    target_ = tokens.narrow(1, 1, config.block_size);
  }

  void step(bool timed) {
    for (auto& p : model_->parameters()) p.mutable_grad() = torch::Tensor();
    volt::bench::synchronize(device_);
    const int64_t before = counter_.live();
    counter_.reset_peak();
    torch::manual_seed(1);
    const auto start = std::chrono::steady_clock::now();
    torch::Tensor loss;
    {
      auto autocast = device_.is_cuda() ? volt::autocast_scope(torch::kCUDA, torch::kBFloat16) : volt::ScopeGuard{};
      const auto logits = model_->forward(input_);
      loss = torch::nn::functional::cross_entropy(logits.view({-1, config_.vocab_size}).to(torch::kFloat),
                                                  target_.reshape(-1));
    }
    volt::bench::synchronize(device_);
    const auto forward_end = std::chrono::steady_clock::now();
    const int64_t saved = counter_.live() - before;
    loss.backward();
    loss_ = loss.item<double>();  // synchronizes the device: the step's time is its whole run
    const auto end = std::chrono::steady_clock::now();
    if (!timed) return;
    step_ms_.push_back(std::chrono::duration<double, std::milli>(end - start).count());
    forward_ms_.push_back(std::chrono::duration<double, std::milli>(forward_end - start).count());
    saved_.push_back(static_cast<double>(saved) / kMiB);
    peak_.push_back(static_cast<double>(counter_.peak() - before) / kMiB);
  }

  Measured measured() const {
    return {volt::bench::median(saved_), volt::bench::median(peak_), volt::bench::median(step_ms_),
            volt::bench::median(forward_ms_), loss_};
  }

 private:
  gpt::GPTConfig config_;
  torch::Device device_;
  MemoryCounter counter_;
  gpt::GPT model_{nullptr};
  torch::Tensor input_, target_;
  std::vector<double> step_ms_, forward_ms_, saved_, peak_;
  double loss_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  namespace po = boost::program_options;
  std::string preset = "cpu", device_name = "cpu";
  int64_t batch = 32, layers = 8;
  int steps = 20, warmup = 2;
  po::options_description flags("activation_checkpointing: GPT decoder with and without volt::checkpoint");
  flags.add_options()("help", "print the flags")("preset", po::value(&preset)->default_value(preset),
                                                 "the GPT example's preset (cpu, gpt2)")(
      "batch", po::value(&batch)->default_value(batch), "sequences per step")(
      "layers", po::value(&layers)->default_value(layers), "decoder blocks")(
      "steps", po::value(&steps)->default_value(steps), "timed steps")(
      "warmup", po::value(&warmup)->default_value(warmup), "untimed steps first")(
      "device", po::value(&device_name)->default_value(device_name), "cpu, or cuda (bf16 autocast)");
  if (!volt::bench::parse_flags(argc, argv, flags)) return 0;
  volt::bench::CountingCPUAllocator::install();  // before the first tensor

  auto config = gpt::GPTConfig::preset(preset);
  config.n_layer = layers;
  config.dropout = 0.1;  // the recompute must draw the same masks
  const torch::Device device(device_name);
  Runner plain_runner(config, batch, device);
  config.activation_checkpointing = true;
  Runner checkpointed_runner(config, batch, device);
  // The two alternate step by step, so that a machine that speeds up or slows down during the run
  // moves both alike.
  for (int i = 0; i < warmup + steps; ++i) {
    plain_runner.step(i >= warmup);
    checkpointed_runner.step(i >= warmup);
  }
  const Measured plain = plain_runner.measured(), checkpointed = checkpointed_runner.measured();

  std::printf("GPT '%s' preset, %lld layers, batch %lld x %lld tokens, dropout 0.1, %s, median of %d steps\n",
              preset.c_str(), static_cast<long long>(layers), static_cast<long long>(batch),
              static_cast<long long>(config.block_size), device.is_cuda() ? "CUDA bf16 autocast" : "CPU float32",
              steps);
  std::printf("| | saved by the forward (MiB) | peak above the weights (MiB) | step (ms) | loss |\n");
  std::printf("|---|---:|---:|---:|---:|\n");
  std::printf("| activations kept | %.1f | %.1f | %.1f | %.6f |\n", plain.saved_mib, plain.peak_mib, plain.step_ms,
              plain.loss);
  std::printf("| volt::checkpoint per block | %.1f | %.1f | %.1f | %.6f |\n", checkpointed.saved_mib,
              checkpointed.peak_mib, checkpointed.step_ms, checkpointed.loss);
  std::printf("| ratio | %.2fx | %.2fx | %.2fx | |\n", checkpointed.saved_mib / plain.saved_mib,
              checkpointed.peak_mib / plain.peak_mib, checkpointed.step_ms / plain.step_ms);
  // A recompute is one more forward of the blocks: the step grows by about the forward's share of it
  // (a little less: the embeddings, the head and the loss are not recomputed).
  std::printf("Estimate: one more forward (%.1f of %.1f ms without checkpointing, with the loss) makes a step "
              "about %.2fx\n",
              plain.forward_ms, plain.step_ms, 1.0 + plain.forward_ms / plain.step_ms);
  return 0;
}

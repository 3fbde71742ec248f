// A GPT-2-style decoder trained on byte tokens (examples/gpt/prepare.cpp writes them):
//   build/examples/gpt --data-dir /tmp/gpt_tokens                      # the 124M shape, bf16-mixed
//   build/examples/gpt --data-dir /tmp/gpt_tokens --preset cpu --max-steps 300
// Accepts every Trainer flag (--strategy ddp|fsdp|tensor_parallel|pipeline:..., --devices,
// --precision, --accumulate-grad-batches, ...; see --help). Defaults of its own: --precision
// bf16-mixed on a GPU (32-true on a CPU), --gradient-clip-val 1.0 and --max-steps 5000 (cpu
// preset: 300) unless given; tensor_parallel's plan= and fsdp's layout=per_parameter unless given;
// under pipeline --limit-val-batches 0 --num-sanity-val-steps 0. Logs
// train_loss (pipeline/loss under pipeline) and val_loss, tokens per second and, on a device whose
// peak volt knows (or with --peak-flops), MFU; validates the final weights (not under pipeline)
// and prints the final metrics.
#include <boost/program_options.hpp>

#include <iomanip>
#include <iostream>

#include "callbacks/throughput_monitor.h"
#include "gpt/gpt_module.h"
#include "strategies/strategy_registry.h"
#include "trainer/volt.h"

namespace po = boost::program_options;

int main(int argc, char** argv) {
  return volt::run_main([&](volt::ProcessLauncher& launcher) {
    std::string preset = "gpt2";
    gpt::TokenDataOptions data;
    gpt::TrainingOptions training;
    double dropout = 0.0, peak_flops = 0.0;
    bool activation_checkpointing = false;
    po::options_description program("GPT example options");
    program.add_options()("data-dir", po::value(&data.data_dir)->required(),
                          "train.bin and val.bin (build/examples/gpt_prepare writes them)")(
        "preset", po::value(&preset)->default_value(preset),
        "model shape: gpt2 (124M: 12 layers, d768, 12 heads, "
        "context 1024, vocabulary 50304) or cpu (4 layers, d128, 4 heads, context 128, vocabulary 256)")(
        "batch-size", po::value(&data.batch_size)->default_value(data.batch_size), "sequences per batch (per process)")(
        "num-workers", po::value(&data.num_workers)->default_value(data.num_workers),
        "threads that build batches ahead")(
        "pin-memory", po::value(&data.pin_memory)->default_value(data.pin_memory),
        "build batches in page-locked memory and upload the next during the step (CUDA)")(
        "lr", po::value(&training.lr)->default_value(training.lr), "peak learning rate (AdamW)")(
        "min-lr", po::value(&training.min_lr)->default_value(training.min_lr),
        "the learning rate the cosine decays to")(
        "warmup-steps", po::value(&training.warmup_steps)->default_value(training.warmup_steps),
        "linear warm-up steps")("decay-steps", po::value(&training.decay_steps)->default_value(training.decay_steps),
                                "steps of the cosine decay; 0: every step of the fit")(
        "weight-decay", po::value(&training.weight_decay)->default_value(training.weight_decay),
        "AdamW's weight decay on the weight matrices")("dropout", po::value(&dropout)->default_value(dropout),
                                                       "dropout in the blocks")(
        "peak-flops", po::value(&peak_flops)->default_value(peak_flops),
        "the device's peak FLOP/s for MFU; 0: the peak volt knows for it (H100, H200, A100)")(
        "activation-checkpointing", po::value(&activation_checkpointing)->default_value(false),
        "recompute each block's forward in the backward instead of keeping its activations (volt::checkpoint)");
    po::variables_map values;
    auto options = volt::TrainerOptions::from_args(argc, argv, program, &values);
    // bf16-mixed where the step runs on a GPU; a CPU without bf16 matrix units (AMX, AVX512-BF16)
    // runs bf16 matmuls several times slower than float32, so it keeps 32-true.
    const bool on_gpu = options.accelerator == "cuda" || (options.accelerator == "auto" && torch::cuda::is_available());
    if (values["precision"].defaulted()) options.precision = on_gpu ? "bf16-mixed" : "32-true";
    if (!options.gradient_clip_val) options.gradient_clip_val = 1.0;
    if (options.max_steps == -1 && !options.max_epochs) options.max_steps = preset == "cpu" ? 300 : 5000;
    if (!options.seed) options.seed = 1337;

    const auto strategy = volt::parse_strategy_spec(options.strategy);
    // Adds key=value to --strategy where the user gave no value of `key`.
    const auto complete_strategy = [&](const std::string& key, const std::string& value) {
      if (strategy.values.count(key) > 0) return;
      options.strategy += std::string(options.strategy.find(':') != std::string::npos ? "," : ":") + key + "=" + value;
    };
    // tensor_parallel splits the blocks as Megatron-LM does (gpt::tensor_parallel_plan).
    if (strategy.name == "tensor_parallel") complete_strategy("plan", gpt::tensor_parallel_plan("model"));
    // fsdp shards each parameter of a unit on its own (FSDP2's layout), so that the weight matrices
    // and the rest, in two param groups, can share a unit.
    if (strategy.name == "fsdp") complete_strategy("layout", "per_parameter");
    // A pipeline runs training steps only (no rank holds the whole model to validate with), so
    // it validates nothing unless asked to (and then refuses, naming the fix).
    const bool pipelined = strategy.name == "pipeline";
    const auto defaulted = [&](const char* flag) { return values.count(flag) == 0 || values[flag].defaulted(); };
    if (pipelined && defaulted("limit-val-batches")) options.limit_val_batches = volt::BatchLimit::count(0);
    if (pipelined && defaulted("num-sanity-val-steps")) options.num_sanity_val_steps = 0;
    auto config = gpt::GPTConfig::preset(preset);
    config.dropout = dropout;
    config.activation_checkpointing = activation_checkpointing;
    // A captured step would replay the recompute's saved random states as they were at capture.
    if (activation_checkpointing && options.cuda_graph) {
      throw volt::ConfigurationError("gpt: --activation-checkpointing is not supported with --cuda-graph; drop one");
    }
    config.validate();
    data.block_size = config.block_size;
    data.vocab_size = config.vocab_size;
    if (training.warmup_steps < 1 || training.lr <= 0 || training.min_lr < 0 || training.min_lr > training.lr) {
      throw volt::ConfigurationError("gpt: expected --warmup-steps >= 1 and 0 <= --min-lr <= --lr");
    }

    volt::Trainer trainer(options, launcher);
    auto model = std::make_shared<gpt::GPTModule>(config, training);
    const double flops =
        gpt::flops_per_token(config, model->parameter_count()) * static_cast<double>(config.block_size);
    auto throughput = std::make_shared<volt::ThroughputMonitor>(volt::ThroughputMonitorOptions{
        .window = 20, .flops_per_sample = flops, .peak_flops = peak_flops, .items_per_sample = config.block_size});
    trainer.add_callback(throughput);
    if (trainer.is_global_zero()) {
      std::cout << "gpt: " << preset << " preset, " << std::fixed << std::setprecision(2)
                << static_cast<double>(model->parameter_count()) / 1e6 << "M parameters, " << std::setprecision(3)
                << flops * 1e-9 << " GFLOP per sequence of " << config.block_size << std::endl;
    }
    auto tokens = std::make_shared<gpt::TokenData>(data);
    trainer.fit(model, tokens);
    // The validation loss of the weights the fit ended with (a fit stopped by --max-steps mid-epoch
    // has not validated them).
    if (!pipelined) {
      trainer.validate(model, tokens);
    } else if (trainer.is_global_zero()) {
      std::cout << "gpt: no final validation under pipeline (its ranks hold stages, not the model); validate the "
                   "checkpoint under single_device or ddp"
                << std::endl;
    }
    if (trainer.is_global_zero()) {
      std::cout << "Final metrics:";
      for (const auto& [name, value] : trainer.callback_metrics()) {
        std::cout << " " << name << "=" << std::setprecision(4) << value;
      }
      std::cout << "\nThroughput over the last 20 batches:";
      for (const auto& [name, value] : throughput->current_values(trainer)) {
        if (name.rfind("train/device/", 0) != 0 || name == "train/device/mfu") std::cout << " " << name << "=" << value;
      }
      std::cout << std::endl;
    }
  });
}

#pragma once
// A small, fully deterministic training problem for loop tests: linear regression with no
// batch-dependent layers, so that accumulating micro-batches is mathematically the same as one
// large batch. Every knob a loop test needs (optimizer, scheduler, dropout, skipped steps) is a
// field of RegressionOptions.
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "strategies/pipeline/pipeline_model.h"
#include "trainer/volt.h"

namespace volt::testing {

struct RegressionOptions {
  int64_t features = 8;
  bool adam = false;             // Adam instead of SGD
  bool fused_adamw = false;      // volt::FusedAdamW (AdamW's defaults but lr) instead of SGD or Adam
  double lr = 0.05;
  double momentum = 0.0;         // SGD's momentum
  double dropout = 0.0;          // > 0 adds a dropout layer (randomness for determinism tests)
  bool step_scheduler = false;   // a StepLR(step_size 1, gamma 0.5) advanced per optimizer step
  // Return an undefined loss (skip backward) for these batches.
  std::function<bool(int64_t batch_idx)> skip_batch;
  // Multiplies the loss of a batch (unset: 1).
  std::function<double(int64_t batch_idx)> loss_weight;
  bool batch_norm = false;       // a BatchNorm1d over the inputs first: buffers (running statistics)
  // Adds a second linear layer's output on these training batches only (unset: never), so that
  // its parameters take part in some steps and not in others.
  std::function<bool(int64_t batch_idx)> use_branch;
  // An Embedding(1, features) built with sparse=true whose row is added to every input: a
  // parameter with a sparse gradient.
  bool sparse_embedding = false;
  // > 0: an MLP body before the linear layer, Sequential(Linear(features, hidden), Tanh,
  // Linear(hidden, hidden), Tanh): modules that FSDP's auto-wrap can reach.
  int64_t hidden = 0;
  // With hidden: the body's second Linear is wrapped by hand (fsdp::wrap), a unit of its own.
  bool wrap_by_hand = false;
  // > 0, with hidden: Dropout(body_dropout) entries first and last in the body, on the inputs and on
  // the body's output (Sequential(Dropout, Linear, Tanh, Linear, Tanh, Dropout): the Linears are
  // body.1 and body.3). Activations that every tensor-parallel rank holds whole, and entries that a
  // pipeline's first and last stages run.
  double body_dropout = 0.0;
  // > 0: that many RegressionBlocks in a ModuleList before the linear layer, each called as
  // volt::call(block, x, mask) (a forward of two tensors that no Sequential holds), with a dropout
  // of block_dropout inside: modules a policy reaches by type (activation_checkpointing, fsdp:wrap).
  int64_t blocks = 0;
  double block_dropout = 0.0;
  bool shard_blocks = false;  // with blocks: each marked by volt::fsdp::shard, a unit of its own under fsdp
  // With blocks: each block's weight frozen (requires_grad false), its bias trained: a unit mixing
  // frozen and trainable parameters (a LoRA model's shape).
  bool freeze_block_weights = false;
  // With blocks: each block's weight stored in this dtype (a bfloat16 base beside float32 biases:
  // a unit of two dtypes), its product computed in it.
  std::optional<torch::Dtype> block_weight_dtype;
};

// x + mask * tanh(W x) with a dropout on the update: a residual block of the shape a transformer's
// (a second argument that is not trained, randomness inside).
class RegressionBlockImpl : public torch::nn::Module {
 public:
  RegressionBlockImpl(int64_t features, double dropout);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask);

  torch::nn::Linear linear{nullptr};
  torch::nn::Dropout dropout{nullptr};
  int64_t forwards = 0;  // runs of the forward, recomputes included
};
TORCH_MODULE(RegressionBlock);

// With `hidden` (and nothing else in the way: no blocks, batch norm, branch, embedding, dropout or
// loss weight) its layers run as one Sequential, body then linear: a PipelineModel that the
// `pipeline` strategy cuts into stages, computing what training_step computes.
class RegressionModule : public Module, public pipeline::PipelineModel {
 public:
  explicit RegressionModule(RegressionOptions options = {});
  torch::Tensor training_step(const Batch& batch, int64_t batch_idx) override;
  void validation_step(const Batch& batch, int64_t batch_idx) override;
  torch::Tensor predict_step(const Batch& batch, int64_t batch_idx) override;  // the model's outputs
  OptimizerConfig configure_optimizers() override;
  void on_before_optimizer_step(torch::optim::Optimizer& optimizer) override { ++optimizer_steps; }

  // PipelineModel: body's entries then linear (ConfigurationError for a model without that shape).
  torch::nn::Sequential pipeline_layers() override;
  torch::Tensor pipeline_loss(const torch::Tensor& output, const torch::Tensor& target) override;

  // Parameters flattened into one tensor, for comparisons.
  torch::Tensor flat_parameters() const;

  int64_t optimizer_steps = 0;
  int64_t training_steps = 0;
  int64_t validation_steps = 0;
  torch::nn::Sequential body{nullptr};          // with options.hidden
  torch::nn::ModuleList blocks{nullptr};        // with options.blocks
  torch::nn::Linear linear{nullptr};
  torch::nn::Dropout dropout{nullptr};
  torch::nn::BatchNorm1d batch_norm{nullptr};  // with options.batch_norm
  torch::nn::Linear branch{nullptr};           // with options.use_branch
  torch::nn::Embedding offset{nullptr};        // with options.sparse_embedding
  RegressionOptions options;

 private:
  torch::Tensor output(torch::Tensor x, bool with_branch);
};

// `module`'s parameters flattened in registration order, unsharded: through the strategy's full
// state dict, so that a strategy that shards parameters (fsdp) gives them whole. [collective]
torch::Tensor full_parameters(const Strategy& strategy, torch::nn::Module& module);

// `samples` rows of y = x·w + noise, fixed by `seed`.
std::shared_ptr<TensorDataset> regression_dataset(int64_t samples, int64_t features = 8, uint64_t seed = 0);

class RegressionData : public DataModule {
 public:
  // `seed` makes the samples; with `seed_loaders` it is also the loaders' shuffling seed, else
  // they leave the order to the Trainer's --seed.
  RegressionData(int64_t samples, int64_t batch_size, bool shuffle = false, uint64_t seed = 0,
                 int64_t val_samples = 0, bool seed_loaders = true);
  std::shared_ptr<DataLoader> train_dataloader() override { return train_; }
  std::shared_ptr<DataLoader> val_dataloader() override { return val_; }
  std::shared_ptr<DataLoader> test_dataloader() override { return val_; }
  std::shared_ptr<DataLoader> predict_dataloader() override { return val_; }

 private:
  std::shared_ptr<DataLoader> train_;
  std::shared_ptr<DataLoader> val_;
};

// Options for a quiet Trainer in tests: no progress bar, summary, checkpointing or loggers.
TrainerOptions quiet_options(const std::string& root_dir);

// Constructs a quiet Trainer with `--strategy strategy --devices devices` (and `--precision
// precision` unless empty): a strategy's option and precision checks run there, before any process
// starts.
void construct_quiet_trainer(const std::string& strategy, int64_t devices, const std::string& precision = "");
// The ConfigurationError message that construction throws (a test failure, and "", when none).
std::string trainer_construction_error(const std::string& strategy, int64_t devices);

// TrainerOptions::from_args for a command line `args` (without the program name).
TrainerOptions options_from_args(std::vector<std::string> args);

}  // namespace volt::testing

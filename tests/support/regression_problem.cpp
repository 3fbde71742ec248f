#include "tests/support/regression_problem.h"

#include "strategies/fsdp/fully_sharded_module.h"
#include "tests/support/test_support.h"

namespace volt::testing {

RegressionBlockImpl::RegressionBlockImpl(int64_t features, double dropout_probability)
    : linear(register_module("linear", torch::nn::Linear(features, features))),
      dropout(register_module("dropout", torch::nn::Dropout(dropout_probability))) {}

torch::Tensor RegressionBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& mask) {
  ++forwards;
  const auto& weight = linear->weight;
  // A weight of another dtype (RegressionOptions::block_weight_dtype): the product in its dtype.
  const auto z = weight.scalar_type() == x.scalar_type()
                     ? linear->forward(x)
                     : torch::matmul(x.to(weight.scalar_type()), weight.t()).to(x.scalar_type()) + linear->bias;
  return x + mask * dropout->forward(torch::tanh(z));
}

RegressionModule::RegressionModule(RegressionOptions opts) : options(std::move(opts)) {
  if (options.blocks > 0) {
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < options.blocks; ++i) {
      RegressionBlock block(options.features, options.block_dropout);
      if (options.shard_blocks) fsdp::shard(block);
      if (options.block_weight_dtype) {
        block->linear->weight.set_data(block->linear->weight.detach().to(*options.block_weight_dtype));
      }
      if (options.freeze_block_weights) block->linear->weight.set_requires_grad(false);
      blocks->push_back(block);
    }
  }
  if (options.hidden > 0) {
    body = register_module("body", torch::nn::Sequential());
    if (options.body_dropout > 0) body->push_back(torch::nn::Dropout(options.body_dropout));
    body->push_back(torch::nn::Linear(options.features, options.hidden));
    body->push_back(torch::nn::Tanh());
    if (options.wrap_by_hand) {
      body->push_back(fsdp::wrap(torch::nn::Linear(options.hidden, options.hidden)));
    } else {
      body->push_back(torch::nn::Linear(options.hidden, options.hidden));
    }
    body->push_back(torch::nn::Tanh());
    if (options.body_dropout > 0) body->push_back(torch::nn::Dropout(options.body_dropout));
  }
  linear = register_module("linear", torch::nn::Linear(options.hidden > 0 ? options.hidden : options.features, 1));
  if (options.dropout > 0) dropout = register_module("dropout", torch::nn::Dropout(options.dropout));
  if (options.batch_norm) batch_norm = register_module("batch_norm", torch::nn::BatchNorm1d(options.features));
  if (options.use_branch) branch = register_module("branch", torch::nn::Linear(options.features, 1));
  if (options.sparse_embedding) {
    offset = register_module("offset", torch::nn::Embedding(torch::nn::EmbeddingOptions(1, options.features).sparse(true)));
  }
}

torch::Tensor RegressionModule::output(torch::Tensor x, bool with_branch) {
  if (offset) x = x + offset->forward(torch::zeros({x.size(0)}, torch::TensorOptions(torch::kLong).device(x.device())));
  if (batch_norm) x = batch_norm->forward(x);
  if (blocks) {
    // Half the features pass each block unchanged: a mask that is an argument, not a parameter.
    const auto mask = (torch::arange(x.size(1), x.options()) < x.size(1) / 2).to(x.dtype());
    for (const auto& block : *blocks) x = volt::call(block->as<RegressionBlock>(), x, mask);
  }
  if (body) x = body->forward(x);
  auto y = linear->forward(x);
  return with_branch ? y + branch->forward(x) : y;
}

namespace {

// Mean squared error from elementwise ops: LibTorch 1.13 has no bfloat16 CPU kernel for
// mse_loss, and the strategy × precision tests train this module in bf16-true.
torch::Tensor squared_error(const torch::Tensor& prediction, const torch::Tensor& target) {
  return (prediction - target).square().mean();
}

}  // namespace

torch::Tensor RegressionModule::training_step(const Batch& batch, int64_t batch_idx) {
  ++training_steps;
  if (options.skip_batch && options.skip_batch(batch_idx)) return {};
  auto x = batch.input;
  if (dropout) x = dropout->forward(x);
  auto loss = squared_error(output(x, options.use_branch && options.use_branch(batch_idx)), batch.target);
  if (options.loss_weight) loss = loss * options.loss_weight(batch_idx);
  log("train_loss", loss);
  return loss;
}

torch::nn::Sequential RegressionModule::pipeline_layers() {
  check<ConfigurationError>(body && !blocks && !batch_norm && !branch && !offset && !dropout && !options.loss_weight &&
                                !options.skip_batch,
                            "RegressionModule: runs as a pipeline's layers only with hidden > 0 and nothing else "
                            "(worker: --model mlp)");
  torch::nn::Sequential layers;
  for (const auto& entry : *body) layers->push_back(entry);
  layers->push_back(linear);
  return layers;
}

torch::Tensor RegressionModule::pipeline_loss(const torch::Tensor& output, const torch::Tensor& target) {
  return squared_error(output, target);
}

void RegressionModule::validation_step(const Batch& batch, int64_t batch_idx) {
  ++validation_steps;
  log("val_loss", squared_error(output(batch.input, false), batch.target));
}

torch::Tensor RegressionModule::predict_step(const Batch& batch, int64_t) { return output(batch.input, false); }

OptimizerConfig RegressionModule::configure_optimizers() {
  std::shared_ptr<torch::optim::Optimizer> optimizer;
  if (options.fused_adamw) {
    optimizer = std::make_shared<FusedAdamW>(parameters(), torch::optim::AdamWOptions(options.lr));
  } else if (options.adam) {
    optimizer = std::make_shared<torch::optim::Adam>(parameters(), torch::optim::AdamOptions(options.lr));
  } else {
    optimizer = std::make_shared<torch::optim::SGD>(parameters(),
                                                    torch::optim::SGDOptions(options.lr).momentum(options.momentum));
  }
  if (!options.step_scheduler) return optimizer;
  return OptimizerConfig(optimizer, {std::make_shared<StepLR>(*optimizer, 1, 0.5), SchedulerInterval::Step});
}

torch::Tensor RegressionModule::flat_parameters() const {
  std::vector<torch::Tensor> flat;
  for (const auto& p : parameters()) flat.push_back(p.detach().flatten());
  return torch::cat(flat);
}

std::shared_ptr<TensorDataset> regression_dataset(int64_t samples, int64_t features, uint64_t seed) {
  auto generator = at::detail::createCPUGenerator(seed);
  auto x = torch::randn({samples, features}, generator);
  auto w = torch::randn({features, 1}, generator);
  auto y = x.matmul(w) + 0.1 * torch::randn({samples, 1}, generator);
  return std::make_shared<TensorDataset>(x, y);
}

RegressionData::RegressionData(int64_t samples, int64_t batch_size, bool shuffle, uint64_t seed,
                               int64_t val_samples, bool seed_loaders) {
  DataLoaderOptions options;
  options.batch_size = batch_size;
  options.shuffle = shuffle;
  if (seed_loaders) options.seed = seed;
  train_ = std::make_shared<DataLoader>(regression_dataset(samples, 8, seed), options);
  if (val_samples > 0) {
    options.shuffle = false;
    val_ = std::make_shared<DataLoader>(regression_dataset(val_samples, 8, seed + 1), options);
  }
}

TrainerOptions quiet_options(const std::string& root_dir) {
  TrainerOptions options;
  options.default_root_dir = root_dir;
  options.loggers.clear();
  options.enable_checkpointing = false;
  options.enable_progress_bar = false;
  options.enable_model_summary = false;
  options.num_sanity_val_steps = 0;
  return options;
}

void construct_quiet_trainer(const std::string& strategy, int64_t devices, const std::string& precision) {
  auto options = quiet_options("/tmp");
  options.strategy = strategy;
  options.devices = devices;
  if (!precision.empty()) options.precision = precision;
  Trainer trainer(options);
}

std::string trainer_construction_error(const std::string& strategy, int64_t devices) {
  return configuration_error_of([&] { construct_quiet_trainer(strategy, devices); });
}

TrainerOptions options_from_args(std::vector<std::string> args) {
  args.insert(args.begin(), "program");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  return TrainerOptions::from_args(static_cast<int>(argv.size()), argv.data());
}

torch::Tensor full_parameters(const Strategy& strategy, torch::nn::Module& module) {
  const auto state = strategy.checkpointing().full_model_state_dict(module);
  std::vector<torch::Tensor> flat;
  // In float64, which holds every parameter's value exactly whatever its dtype (a model may mix them).
  for (const auto& item : module.named_parameters())
    flat.push_back(state.get_tensor(item.key()).flatten().to(torch::kDouble));
  return torch::cat(flat);
}

}  // namespace volt::testing

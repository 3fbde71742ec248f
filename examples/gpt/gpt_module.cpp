#include "gpt/gpt_module.h"

#include <cmath>

#include "data/memmap_token_dataset.h"
#include "run/optim/fused_adamw.h"

namespace gpt {

double lr_factor(const TrainingOptions& options, int64_t decay_steps, int64_t step) {
  const double floor = options.min_lr / options.lr;
  if (step < options.warmup_steps) return static_cast<double>(step + 1) / static_cast<double>(options.warmup_steps);
  if (step >= decay_steps) return floor;
  const double progress = static_cast<double>(step - options.warmup_steps) /
                          static_cast<double>(std::max<int64_t>(1, decay_steps - options.warmup_steps));
  return floor + 0.5 * (1.0 + std::cos(M_PI * progress)) * (1.0 - floor);
}

GPTModule::GPTModule(const GPTConfig& config, TrainingOptions options) : options_(options) {
  model_ = register_module("model", GPT(config));
  for (const auto& item : model_->named_parameters()) {
    if (item.value().dim() >= 2) matrices_.insert(item.key());
  }
}

int64_t GPTModule::parameter_count() const {
  int64_t n = 0;
  for (const auto& p : model_->parameters()) n += p.numel();
  return n;
}

torch::Tensor GPTModule::loss(const volt::Batch& batch) {
  return next_token_loss(model_->forward(batch.input), batch.target);
}

torch::Tensor GPTModule::training_step(const volt::Batch& batch, int64_t) {
  auto value = loss(batch);
  log("train_loss", value, {.prog_bar = true});
  return value;
}

void GPTModule::validation_step(const volt::Batch& batch, int64_t) { log("val_loss", loss(batch), {.prog_bar = true}); }

volt::OptimizerConfig GPTModule::configure_optimizers() {
  std::vector<torch::Tensor> decayed, plain;
  for (const auto& item : model_->named_parameters()) {
    (matrices_.count(item.key()) > 0 ? decayed : plain).push_back(item.value());
  }
  const auto group = [&](std::vector<torch::Tensor> params, double decay) {
    return torch::optim::OptimizerParamGroup(
        std::move(params),
        std::make_unique<torch::optim::AdamWOptions>(
            torch::optim::AdamWOptions(options_.lr).betas({0.9, 0.95}).eps(1e-8).weight_decay(decay)));
  };
  auto optimizer = std::make_shared<volt::FusedAdamW>(
      std::vector<torch::optim::OptimizerParamGroup>{group(decayed, options_.weight_decay), group(plain, 0.0)},
      torch::optim::AdamWOptions(options_.lr));
  const int64_t decay_steps =
      options_.decay_steps > 0 ? options_.decay_steps : std::max<int64_t>(1, trainer().estimated_stepping_batches());
  const TrainingOptions options = options_;
  auto schedule = std::make_shared<volt::LambdaLR>(
      *optimizer, [options, decay_steps](int64_t step) { return lr_factor(options, decay_steps, step); });
  return volt::OptimizerConfig(optimizer, {schedule, volt::SchedulerInterval::Step});
}

TokenData::TokenData(TokenDataOptions options) : options_(std::move(options)) {}

void TokenData::setup(volt::TrainerFn) {
  if (train_) return;
  const auto dataset = [&](const std::string& file) {
    volt::MemmapTokenOptions o;
    o.path = options_.data_dir + "/" + file;
    o.block_size = options_.block_size;
    o.vocab_size = options_.vocab_size;
    return std::make_shared<volt::MemmapTokenDataset>(o);
  };
  train_ = dataset("train.bin");
  val_ = dataset("val.bin");
}

std::shared_ptr<volt::DataLoader> TokenData::train_dataloader() { return loader(train_, true); }
std::shared_ptr<volt::DataLoader> TokenData::val_dataloader() { return loader(val_, false); }

std::shared_ptr<volt::DataLoader> TokenData::loader(std::shared_ptr<const volt::Dataset> dataset, bool shuffle) const {
  return std::make_shared<volt::DataLoader>(dataset,
                                            volt::DataLoaderOptions{.batch_size = options_.batch_size,
                                                                    .shuffle = shuffle,
                                                                    .num_workers = options_.num_workers,
                                                                    .persistent_workers = options_.num_workers > 0,
                                                                    .pin_memory = options_.pin_memory});
}

}  // namespace gpt

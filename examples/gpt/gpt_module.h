#pragma once
// The GPT example's LightningModule and data: next-token cross-entropy on windows of a token
// file, AdamW (fused where LibTorch has the kernel) with weight decay on the matrices only, a
// linear warm-up then cosine decay of the learning rate per optimizer step.
#include <memory>
#include <set>
#include <string>

#include "gpt/gpt_model.h"
#include "strategies/pipeline/pipeline_model.h"
#include "trainer/volt.h"

namespace gpt {

struct TrainingOptions {
  double lr = 6e-4;      // peak learning rate, after warm-up
  double min_lr = 6e-5;  // the cosine decays to it
  int64_t warmup_steps = 100;
  // Steps the cosine decays over (then min_lr); 0: every step this fit will take.
  int64_t decay_steps = 0;
  double weight_decay = 0.1;  // on weights of dimension >= 2 (not biases, LayerNorms)
};

// The learning rate's factor of `lr` after `step` optimizer steps.
double lr_factor(const TrainingOptions& options, int64_t decay_steps, int64_t step);

// Under `--strategy pipeline` the model's layers are cut into stages (GPTImpl::pipeline_layers),
// the tied token embedding kept on both the first and the last stage.
class GPTModule : public volt::Module, public volt::pipeline::PipelineModel {
 public:
  GPTModule(const GPTConfig& config, TrainingOptions options);
  torch::Tensor training_step(const volt::Batch& batch, int64_t batch_idx) override;
  void validation_step(const volt::Batch& batch, int64_t batch_idx) override;
  volt::OptimizerConfig configure_optimizers() override;

  // volt::pipeline::PipelineModel
  torch::nn::Sequential pipeline_layers() override { return model_->pipeline_layers(); }
  torch::Tensor pipeline_loss(const torch::Tensor& output, const torch::Tensor& target) override {
    return next_token_loss(output, target);
  }
  std::vector<volt::pipeline::SharedParameter> pipeline_shared_parameters() override {
    return {{.layer = model_->output_layer_index(), .parameter = model_->tied_weight()}};
  }

  GPT& model() { return model_; }
  int64_t parameter_count() const;

 private:
  torch::Tensor loss(const volt::Batch& batch);
  TrainingOptions options_;
  GPT model_{nullptr};
  // The weight matrices (dimension >= 2), by name, as the model was built: configure_optimizers
  // runs after the strategy set the model up, when a parameter another rank holds (a pipeline's
  // other stages, fsdp's shards) reads as an empty tensor, so its shape no longer says.
  std::set<std::string> matrices_;
};

struct TokenDataOptions {
  std::string data_dir;  // train.bin and val.bin (gpt_prepare writes them)
  int64_t block_size = 1024;
  int64_t vocab_size = 50304;  // every id read is checked against it
  int64_t batch_size = 16;
  int64_t num_workers = 2;
  bool pin_memory = false;
};

// train.bin as windows of block_size tokens, each token once per epoch in a shuffled order;
// val.bin in order.
class TokenData : public volt::DataModule {
 public:
  explicit TokenData(TokenDataOptions options);
  void setup(volt::TrainerFn) override;
  std::shared_ptr<volt::DataLoader> train_dataloader() override;
  std::shared_ptr<volt::DataLoader> val_dataloader() override;

 private:
  std::shared_ptr<volt::DataLoader> loader(std::shared_ptr<const volt::Dataset> dataset, bool shuffle) const;
  TokenDataOptions options_;
  std::shared_ptr<const volt::Dataset> train_, val_;
};

}  // namespace gpt

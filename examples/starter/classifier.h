#pragma once
// The model: a small MLP that classifies points. What a step computes and what it logs is all a
// Module says; where it runs (processes, devices, precision) is the Trainer's business.
#include "trainer/volt.h"

namespace starter {

struct ClassifierOptions {
  int64_t features = 2;
  int64_t classes = 2;
  int64_t hidden = 32;
  double lr = 0.01;  // AdamW's, decayed by StepLR(step_size 10 epochs, gamma 0.5)
};

class Classifier : public volt::Module {
 public:
  explicit Classifier(ClassifierOptions options) : options_(options) {
    net_ = register_module("net", torch::nn::Sequential(torch::nn::Linear(options.features, options.hidden),
                                                        torch::nn::ReLU(),
                                                        torch::nn::Linear(options.hidden, options.hidden),
                                                        torch::nn::ReLU(),
                                                        torch::nn::Linear(options.hidden, options.classes)));
    save_hyperparameters({{"hidden", options.hidden}, {"lr", options.lr}});
  }

  torch::Tensor training_step(const volt::Batch& batch, int64_t) override {
    auto loss = torch::nn::functional::cross_entropy(net_->forward(batch.input), batch.target);
    log("train_loss", loss, {.prog_bar = true});
    return loss;
  }

  void validation_step(const volt::Batch& batch, int64_t) override {
    auto logits = net_->forward(batch.input);
    // sync_dist: every process sees the accuracy over all of the validation data, so that a
    // decision taken on it (StopAtAccuracy) is the same on every rank.
    log("val_loss", torch::nn::functional::cross_entropy(logits, batch.target), {.sync_dist = true});
    log("val_acc", logits.argmax(1).eq(batch.target).to(torch::kFloat).mean(), {.prog_bar = true, .sync_dist = true});
  }

  volt::OptimizerConfig configure_optimizers() override {
    auto optimizer = std::make_shared<torch::optim::AdamW>(parameters(), torch::optim::AdamWOptions(options_.lr));
    return {optimizer, std::make_shared<volt::StepLR>(*optimizer, /*step_size=*/10, /*gamma=*/0.5)};
  }

 private:
  ClassifierOptions options_;
  torch::nn::Sequential net_{nullptr};
};

}  // namespace starter

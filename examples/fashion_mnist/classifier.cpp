#include "fashion_mnist/classifier.h"

namespace fashion_mnist {

namespace nn = torch::nn;

Classifier::Classifier(ClassifierOptions options) : options_(options) {
  volt::check<volt::ConfigurationError>(options_.lr_schedule_steps >= 0, "--lr-schedule-steps: expected >= 0 "
                                        "(0: every step of the fit), got ", options_.lr_schedule_steps);
  features_ = register_module(
      "features",
      nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 32, 3).padding(1).bias(false)), nn::BatchNorm2d(32),
                     nn::ReLU(), nn::MaxPool2d(2),
                     nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1).bias(false)), nn::BatchNorm2d(64),
                     nn::ReLU(), nn::MaxPool2d(2)));
  head_ = register_module("head", nn::Sequential(nn::Flatten(), nn::Linear(64 * 7 * 7, 128), nn::ReLU(),
                                                 nn::Dropout(options_.dropout), nn::Linear(128, 10)));
  save_hyperparameters({{"lr", options_.lr},
                        {"weight_decay", options_.weight_decay},
                        {"dropout", options_.dropout}});
}

torch::Tensor Classifier::forward(const torch::Tensor& images) { return head_->forward(features_->forward(images)); }

torch::Tensor Classifier::training_step(const volt::Batch& batch, int64_t) {
  const auto logits = forward(batch.input);
  const auto loss = torch::nn::functional::cross_entropy(logits, batch.target);
  log("train_loss", loss, {.prog_bar = true});
  log("train_acc", (logits.argmax(1) == batch.target).to(torch::kFloat).mean());
  return loss;
}

void Classifier::evaluate(const volt::Batch& batch, const std::string& prefix) {
  const auto logits = forward(batch.input);
  log(prefix + "_loss", torch::nn::functional::cross_entropy(logits, batch.target), {.sync_dist = true});
  log(prefix + "_acc", (logits.argmax(1) == batch.target).to(torch::kFloat).mean(),
      {.prog_bar = true, .sync_dist = true});
}

void Classifier::validation_step(const volt::Batch& batch, int64_t) { evaluate(batch, "val"); }
void Classifier::test_step(const volt::Batch& batch, int64_t) { evaluate(batch, "test"); }

torch::Tensor Classifier::predict_step(const volt::Batch& batch, int64_t) {
  return forward(batch.input).argmax(1);
}

volt::OptimizerConfig Classifier::configure_optimizers() {
  auto optimizer = std::make_shared<torch::optim::AdamW>(
      parameters(), torch::optim::AdamWOptions(options_.lr).weight_decay(options_.weight_decay));
  // Cosine annealing per optimizer step, over every step the fit will take (or the given length).
  const int64_t total_steps = options_.lr_schedule_steps > 0
                                  ? options_.lr_schedule_steps
                                  : std::max<int64_t>(1, trainer().estimated_stepping_batches());
  auto schedule = std::make_shared<volt::CosineAnnealingLR>(*optimizer, total_steps);
  return volt::OptimizerConfig(optimizer, {schedule, volt::SchedulerInterval::Step});
}

}  // namespace fashion_mnist

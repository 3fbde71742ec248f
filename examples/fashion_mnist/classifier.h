#pragma once
#include "trainer/volt.h"

namespace fashion_mnist {

struct ClassifierOptions {
  double lr = 2e-3;            // AdamW learning rate
  double weight_decay = 1e-4;
  double dropout = 0.25;
  // Steps the cosine learning-rate schedule anneals over; 0: every step this fit will take. Fix it
  // when a run will be stopped and resumed with a longer limit (--max-steps), so that both parts
  // follow the schedule of the whole run.
  int64_t lr_schedule_steps = 0;
};

// The main job's CNN: two 3×3 conv blocks (32 and 64 channels, batch norm, ReLU, 2×2 max pool),
// a 128-unit hidden layer with dropout, and 10 logits. Logs train_loss/train_acc per step,
// val_loss/val_acc and test_loss/test_acc per epoch.
class Classifier : public volt::Module {
 public:
  explicit Classifier(ClassifierOptions options = {});
  torch::Tensor forward(const torch::Tensor& images);

  torch::Tensor training_step(const volt::Batch& batch, int64_t batch_idx) override;
  void validation_step(const volt::Batch& batch, int64_t batch_idx) override;
  void test_step(const volt::Batch& batch, int64_t batch_idx) override;
  torch::Tensor predict_step(const volt::Batch& batch, int64_t batch_idx) override;
  volt::OptimizerConfig configure_optimizers() override;

 private:
  void evaluate(const volt::Batch& batch, const std::string& prefix);

  ClassifierOptions options_;
  torch::nn::Sequential features_{nullptr};
  torch::nn::Sequential head_{nullptr};
};

}  // namespace fashion_mnist

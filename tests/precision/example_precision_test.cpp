// The main job's CNN on the real Fashion-MNIST files under bf16-mixed, end to end: it trains, its
// weights stay float32, and a short run reaches the accuracy of the same run in 32-true. (The
// example program's answers to bad precisions: tests/e2e/example_precision_cli_test.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>

#include "fashion_mnist/classifier.h"
#include "fashion_mnist/fashion_mnist_data.h"
#include "tests/support/regression_problem.h"
#include "tests/support/test_support.h"

namespace volt::testing {
namespace {

struct ShortRun {
  double test_acc = 0;
  torch::Dtype weight_dtype = torch::kFloat;
  double first_loss = 0, last_loss = 0;
};

// 20 steps of batch 64, then 10 test batches; `data` is shared so that the files load once.
ShortRun train_example(const std::string& precision, const std::shared_ptr<fashion_mnist::FashionMnistData>& data) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.max_steps = 20;
  options.precision = precision;
  options.seed = 7;
  options.limit_val_batches = BatchLimit::count(0);
  options.limit_test_batches = BatchLimit::count(10);
  Trainer trainer(options);
  torch::manual_seed(7);  // the same initial weights for both precisions
  auto model = std::make_shared<fashion_mnist::Classifier>();
  // train_loss per step, as the loggers would see it.
  struct LossRecorder : Callback {
    std::vector<double> losses;
    void on_train_batch_end(Trainer& t, Module&, const torch::Tensor&, const Batch&, int64_t) override {
      losses.push_back(t.callback_metrics().at("train_loss"));
    }
  };
  auto recorder = std::make_shared<LossRecorder>();
  trainer.add_callback(recorder);
  trainer.fit(model, data);
  const auto metrics = trainer.test(model, data);
  ShortRun run;
  run.test_acc = metrics.at("test_acc");
  run.weight_dtype = model->parameters().front().scalar_type();
  // Means over the first and last five steps, to see the loss fall despite batch noise.
  for (int i = 0; i < 5; ++i) {
    run.first_loss += recorder->losses[i] / 5;
    run.last_loss += recorder->losses[recorder->losses.size() - 1 - i] / 5;
  }
  return run;
}

TEST(ExamplePrecision, Bf16MixedTrainsTheExampleCnnLikeFloat32) {
  fashion_mnist::FashionMnistOptions data_options;
  data_options.batch_size = 64;
  auto data = std::make_shared<fashion_mnist::FashionMnistData>(data_options);
  const auto bf16 = train_example("bf16-mixed", data);
  const auto f32 = train_example("32-true", data);
  EXPECT_EQ(bf16.weight_dtype, torch::kFloat) << "bf16-mixed keeps float32 master weights";
  EXPECT_LT(bf16.last_loss, 0.7 * bf16.first_loss) << "the loss falls under bf16-mixed";
  EXPECT_GT(bf16.test_acc, 0.6) << "10 classes: chance is 0.1";
  EXPECT_NEAR(bf16.test_acc, f32.test_acc, 0.05) << "bf16-mixed " << bf16.test_acc << " vs 32-true " << f32.test_acc;
  std::cout << "bf16-mixed: test_acc " << bf16.test_acc << ", loss " << bf16.first_loss << " -> " << bf16.last_loss
            << "; 32-true: test_acc " << f32.test_acc << ", loss " << f32.first_loss << " -> " << f32.last_loss << std::endl;
}

}  // namespace
}  // namespace volt::testing

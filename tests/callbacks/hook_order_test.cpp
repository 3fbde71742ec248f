// The Trainer calls every Callback hook at the right point: the exact order during a fit with a
// sanity check, accumulation and validation, during test and predict, and on an exception.
#include <gtest/gtest.h>

#include "tests/support/regression_problem.h"
#include "tests/support/test_support.h"

namespace volt::testing {
namespace {

// Records every hook as "name" or "name(batch_idx)", plus a few values seen along the way.
class RecordingCallback : public Callback {
 public:
  std::vector<std::string> calls;
  std::vector<double> batch_end_losses, before_backward_losses;
  std::vector<int64_t> batch_end_steps;
  Module* module_seen = nullptr;

  void note(const std::string& name, Module& module) {
    calls.push_back(name);
    module_seen = &module;
  }
  void note(const std::string& name, Module& module, int64_t batch_idx) {
    note(name + "(" + std::to_string(batch_idx) + ")", module);
  }

  void setup(Trainer&, Module& m, const std::string& stage) override { note("setup:" + stage, m); }
  void teardown(Trainer&, Module& m, const std::string& stage) override { note("teardown:" + stage, m); }
  void on_fit_start(Trainer&, Module& m) override { note("fit_start", m); }
  void on_fit_end(Trainer&, Module& m) override { note("fit_end", m); }
  void on_sanity_check_start(Trainer&, Module& m) override { note("sanity_check_start", m); }
  void on_sanity_check_end(Trainer&, Module& m) override { note("sanity_check_end", m); }
  void on_train_start(Trainer&, Module& m) override { note("train_start", m); }
  void on_train_end(Trainer&, Module& m) override { note("train_end", m); }
  void on_train_epoch_start(Trainer&, Module& m) override { note("train_epoch_start", m); }
  void on_train_epoch_end(Trainer&, Module& m) override { note("train_epoch_end", m); }
  void on_train_batch_start(Trainer&, Module& m, const Batch&, int64_t b) override { note("train_batch_start", m, b); }
  void on_train_batch_end(Trainer& t, Module& m, const torch::Tensor& loss, const Batch&, int64_t b) override {
    note("train_batch_end", m, b);
    batch_end_losses.push_back(loss.item<double>());
    batch_end_steps.push_back(t.global_step());
  }
  void on_validation_start(Trainer&, Module& m) override { note("validation_start", m); }
  void on_validation_end(Trainer&, Module& m) override { note("validation_end", m); }
  void on_validation_epoch_start(Trainer&, Module& m) override { note("validation_epoch_start", m); }
  void on_validation_epoch_end(Trainer&, Module& m) override { note("validation_epoch_end", m); }
  void on_validation_batch_start(Trainer&, Module& m, const Batch&, int64_t b) override {
    note("validation_batch_start", m, b);
  }
  void on_validation_batch_end(Trainer&, Module& m, const Batch&, int64_t b) override {
    note("validation_batch_end", m, b);
  }
  void on_test_start(Trainer&, Module& m) override { note("test_start", m); }
  void on_test_end(Trainer&, Module& m) override { note("test_end", m); }
  void on_test_epoch_start(Trainer&, Module& m) override { note("test_epoch_start", m); }
  void on_test_epoch_end(Trainer&, Module& m) override { note("test_epoch_end", m); }
  void on_test_batch_start(Trainer&, Module& m, const Batch&, int64_t b) override { note("test_batch_start", m, b); }
  void on_test_batch_end(Trainer&, Module& m, const Batch&, int64_t b) override { note("test_batch_end", m, b); }
  void on_predict_start(Trainer&, Module& m) override { note("predict_start", m); }
  void on_predict_end(Trainer&, Module& m) override { note("predict_end", m); }
  void on_predict_batch_start(Trainer&, Module& m, const Batch&, int64_t b) override {
    note("predict_batch_start", m, b);
  }
  void on_predict_batch_end(Trainer&, Module& m, const torch::Tensor& prediction, const Batch& batch,
                            int64_t b) override {
    note("predict_batch_end", m, b);
    EXPECT_EQ(prediction.size(0), batch.size());
  }
  void on_before_backward(Trainer&, Module& m, const torch::Tensor& loss) override {
    note("before_backward", m);
    before_backward_losses.push_back(loss.item<double>());
  }
  void on_after_backward(Trainer&, Module& m) override { note("after_backward", m); }
  void on_before_optimizer_step(Trainer&, Module& m, torch::optim::Optimizer&) override {
    note("before_optimizer_step", m);
  }
  void on_before_zero_grad(Trainer&, Module& m, torch::optim::Optimizer&) override { note("before_zero_grad", m); }
  void on_exception(Trainer&, Module& m, const std::exception& error) override {
    note(std::string("exception:") + error.what(), m);
  }
};

class PredictingModule : public RegressionModule {
 public:
  void test_step(const Batch& batch, int64_t) override { log("test_loss", torch::mse_loss(linear(batch.input), batch.target)); }
  torch::Tensor predict_step(const Batch& batch, int64_t) override { return linear(batch.input); }
  torch::Tensor training_step(const Batch& batch, int64_t batch_idx) override {
    if (fail_at_batch == batch_idx) throw DataError("broken batch " + std::to_string(batch_idx));
    return RegressionModule::training_step(batch, batch_idx);
  }
  int64_t fail_at_batch = -1;
};

std::vector<std::string> micro_batch(int64_t b, bool closes_window) {
  std::vector<std::string> calls{"train_batch_start(" + std::to_string(b) + ")", "before_backward", "after_backward"};
  if (closes_window) calls.insert(calls.end(), {"before_optimizer_step", "before_zero_grad"});
  calls.push_back("train_batch_end(" + std::to_string(b) + ")");
  return calls;
}

std::vector<std::string> validation(int64_t batches) {
  std::vector<std::string> calls{"validation_start", "validation_epoch_start"};
  for (int64_t b = 0; b < batches; ++b) {
    // Built by appending: GCC 12 warns falsely on "literal" + std::string here (-Warray-bounds,
    // seen in the LibTorch 2.x build).
    std::string index(1, '(');
    index.append(std::to_string(b)).append(")");
    calls.push_back(std::string("validation_batch_start").append(index));
    calls.push_back(std::string("validation_batch_end").append(index));
  }
  calls.insert(calls.end(), {"validation_epoch_end", "validation_end"});
  return calls;
}

template <typename... Parts>
std::vector<std::string> concat(const Parts&... parts) {
  std::vector<std::string> out;
  (out.insert(out.end(), parts.begin(), parts.end()), ...);
  return out;
}

TEST(HookOrder, FitWithSanityCheckAccumulationAndValidation) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.max_epochs = 1;
  options.accumulate_grad_batches = 2;
  options.num_sanity_val_steps = 1;
  auto recorder = std::make_shared<RecordingCallback>();
  auto model = std::make_shared<PredictingModule>();
  Trainer trainer(options);
  trainer.add_callback(recorder);
  trainer.fit(model, std::make_shared<RegressionData>(32, 8, false, 0, 16));  // 4 train, 2 val batches

  const auto expected = concat(
      std::vector<std::string>{"setup:fit", "fit_start", "sanity_check_start"}, validation(1),
      std::vector<std::string>{"sanity_check_end", "train_start", "train_epoch_start"}, micro_batch(0, false),
      micro_batch(1, true), micro_batch(2, false), micro_batch(3, true), validation(2),
      std::vector<std::string>{"train_epoch_end", "train_end", "fit_end", "teardown:fit"});
  EXPECT_EQ(recorder->calls, expected);
  EXPECT_EQ(recorder->module_seen, model.get());
  // on_train_batch_end sees the step the batch completed and the loss training_step returned;
  // on_before_backward sees it divided by the accumulation window.
  EXPECT_EQ(recorder->batch_end_steps, (std::vector<int64_t>{0, 1, 1, 2}));
  ASSERT_EQ(recorder->before_backward_losses.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_NEAR(recorder->before_backward_losses[i], recorder->batch_end_losses[i] / 2, 1e-6) << "batch " << i;
  }
}

TEST(HookOrder, TestAndPredict) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  auto recorder = std::make_shared<RecordingCallback>();
  auto model = std::make_shared<PredictingModule>();
  Trainer trainer(options);
  trainer.add_callback(recorder);
  auto data = std::make_shared<RegressionData>(16, 8, false, 0, 16);
  trainer.test(model, data);
  EXPECT_EQ(recorder->calls,
            (std::vector<std::string>{"setup:test", "test_start", "test_epoch_start", "test_batch_start(0)",
                                      "test_batch_end(0)", "test_batch_start(1)", "test_batch_end(1)",
                                      "test_epoch_end", "test_end", "teardown:test"}));

  class PredictData : public RegressionData {
   public:
    using RegressionData::RegressionData;
    std::shared_ptr<DataLoader> predict_dataloader() override { return train_dataloader(); }
  };
  recorder->calls.clear();
  const auto predictions = trainer.predict(model, std::make_shared<PredictData>(16, 8));
  EXPECT_EQ(predictions.size(), 2u);
  EXPECT_EQ(recorder->calls,
            (std::vector<std::string>{"setup:predict", "predict_start", "predict_batch_start(0)",
                                      "predict_batch_end(0)", "predict_batch_start(1)", "predict_batch_end(1)",
                                      "predict_end", "teardown:predict"}));
}

TEST(HookOrder, AnExceptionReachesOnExceptionThenTeardownAndIsRethrown) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.max_epochs = 1;
  auto recorder = std::make_shared<RecordingCallback>();
  auto model = std::make_shared<PredictingModule>();
  model->fail_at_batch = 1;
  Trainer trainer(options);
  trainer.add_callback(recorder);
  EXPECT_THROW(trainer.fit(model, std::make_shared<RegressionData>(32, 8)), DataError);
  const std::vector<std::string> tail(recorder->calls.end() - 4, recorder->calls.end());
  EXPECT_EQ(tail, (std::vector<std::string>{"train_batch_end(0)", "train_batch_start(1)",
                                            "exception:broken batch 1", "teardown:fit"}));
  EXPECT_EQ(trainer.status(), TrainerStatus::Interrupted);
}

TEST(HookOrder, StateKeysTellInstancesWithDifferentSettingsApart) {
  EXPECT_EQ(RecordingCallback().state_key(), "RecordingCallback");
  EarlyStopping loss({.monitor = "val_loss"});
  EarlyStopping acc({.monitor = "val_acc", .mode = MonitorMode::Max});
  EXPECT_NE(loss.state_key(), acc.state_key());
  EXPECT_EQ(loss.state_key(), "EarlyStopping{monitor=val_loss,mode=min}");
}

}  // namespace
}  // namespace volt::testing

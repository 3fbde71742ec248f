// Errors a user meets through the Trainer: a checkpoint of another model names the missing,
// unexpected and mis-shaped keys; a weights-only checkpoint cannot resume a fit; a missing file
// names its path. validate/test/predict load a checkpoint's weights.
#include "tests/checkpoint/checkpoint_test_support.h"

namespace volt::testing {
namespace {

// Same training problem, other parameter names and shapes.
class OtherModel : public Module {
 public:
  OtherModel() {
    fc = register_module("fc", torch::nn::Linear(8, 4));
    out = register_module("linear", torch::nn::Linear(4, 1));  // "linear" again, with other shapes
  }
  torch::Tensor training_step(const Batch& batch, int64_t) override {
    return torch::mse_loss(out->forward(fc->forward(batch.input)), batch.target);
  }
  OptimizerConfig configure_optimizers() override {
    return std::shared_ptr<torch::optim::Optimizer>(
        std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1)));
  }
  torch::nn::Linear fc{nullptr}, out{nullptr};
};

std::string fit_error(const std::string& root, std::shared_ptr<Module> model, const std::string& ckpt_path) {
  auto options = quiet_options(root);
  options.max_epochs = 1;
  Trainer trainer(options);
  try {
    trainer.fit(model, std::make_shared<RegressionData>(32, 8), ckpt_path);
  } catch (const CheckpointError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a CheckpointError";
  return "";
}

// A checkpoint of the regression model after one epoch.
std::string regression_checkpoint(const TemporaryDirectory& dir, bool weights_only = false) {
  auto options = quiet_options(dir.path());
  options.max_epochs = 1;
  Trainer trainer(options);
  auto model = std::make_shared<RegressionModule>();
  trainer.fit(model, std::make_shared<RegressionData>(32, 8));
  const auto path = dir.file(weights_only ? "weights_only.ckpt" : "full.ckpt");
  trainer.save_checkpoint(path, weights_only);
  return path;
}

TEST(TrainerCheckpointErrors, ACheckpointOfAnotherModelNamesEveryMismatchingKey) {
  TemporaryDirectory dir;
  const auto path = regression_checkpoint(dir);
  const auto message = fit_error(dir.path(), std::make_shared<OtherModel>(), path);
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("missing keys (in the model, not in the checkpoint) (2): fc.weight, fc.bias"),
            std::string::npos) << message;
  EXPECT_NE(message.find("linear.weight: checkpoint [1, 8], model [1, 4]"), std::string::npos) << message;
  EXPECT_EQ(message.find("unexpected keys ("), std::string::npos) << message;

  // Fewer layers than the checkpoint: its extra keys are "unexpected".
  auto smaller = std::make_shared<RegressionModule>(RegressionOptions{.features = 8});
  auto bigger_options = quiet_options(dir.path());
  bigger_options.max_epochs = 1;
  Trainer trainer(bigger_options);
  auto other = std::make_shared<OtherModel>();
  trainer.fit(other, std::make_shared<RegressionData>(32, 8));
  trainer.save_checkpoint(dir.file("other.ckpt"));
  const auto reverse = fit_error(dir.path(), smaller, dir.file("other.ckpt"));
  EXPECT_NE(reverse.find("unexpected keys (in the checkpoint, not in the model) (2): fc.weight, fc.bias"),
            std::string::npos) << reverse;
}

TEST(TrainerCheckpointErrors, AWeightsOnlyCheckpointCannotResumeAFit) {
  TemporaryDirectory dir;
  const auto path = regression_checkpoint(dir, /*weights_only=*/true);
  const auto message = fit_error(dir.path(), std::make_shared<RegressionModule>(), path);
  EXPECT_NE(message.find("weights only"), std::string::npos) << message;
}

TEST(TrainerCheckpointErrors, AMissingCheckpointNamesItsPath) {
  TemporaryDirectory dir;
  const auto message = fit_error(dir.path(), std::make_shared<RegressionModule>(), dir.file("nope.ckpt"));
  EXPECT_NE(message.find("no file at '" + dir.file("nope.ckpt") + "'"), std::string::npos) << message;
}

TEST(TrainerCheckpointErrors, SavingWithoutAModelIsAnError) {
  TemporaryDirectory dir;
  Trainer trainer(quiet_options(dir.path()));
  EXPECT_THROW(trainer.save_checkpoint(dir.file("x.ckpt")), ConfigurationError);
}

TEST(TrainerCheckpoint, ValidateLoadsTheCheckpointsWeights) {
  TemporaryDirectory dir;
  const auto path = regression_checkpoint(dir, /*weights_only=*/true);
  torch::manual_seed(123);
  auto model = std::make_shared<RegressionModule>();
  Trainer trainer(quiet_options(dir.path()));
  trainer.validate(model, std::make_shared<RegressionData>(32, 8, false, 0, 16), path);
  StateDict expected = CheckpointIO().load(path).child("state_dict");
  EXPECT_TRUE(torch::equal(model->linear->weight, expected.get_tensor("linear.weight")));
  EXPECT_TRUE(torch::equal(model->linear->bias, expected.get_tensor("linear.bias")));
}

// The regression model with a test_step (its validation step), for Trainer::test.
class TestableRegression : public RegressionModule {
 public:
  void test_step(const Batch& batch, int64_t batch_idx) override { validation_step(batch, batch_idx); }
};

// ckpt_path "last" with no checkpoint under the root: fit starts from scratch
// (ResumeLast tests), validate/test/predict fail naming the root and what to pass
// (docs/checkpoints.md; Lightning warns and evaluates the weights in memory, which would report metrics
// of an untrained model as a checkpoint's). With a last.ckpt there, all three load it.
TEST(TrainerCheckpointErrors, CkptPathLastWithoutACheckpointFailsEvaluation) {
  TemporaryDirectory dir;
  const auto data = std::make_shared<RegressionData>(32, 8, false, 0, 16);
  const std::vector<std::pair<std::string, std::function<void(Trainer&, std::shared_ptr<Module>)>>> evaluations{
      {"validate", [&](Trainer& t, std::shared_ptr<Module> m) { t.validate(m, data, "last"); }},
      {"test", [&](Trainer& t, std::shared_ptr<Module> m) { t.test(m, data, "last"); }},
      {"predict", [&](Trainer& t, std::shared_ptr<Module> m) { t.predict(m, data, "last"); }}};
  for (const auto& [name, evaluate] : evaluations) {
    Trainer trainer(quiet_options(dir.path()));
    try {
      evaluate(trainer, std::make_shared<TestableRegression>());
      ADD_FAILURE() << name << " ran without a checkpoint";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("ckpt_path 'last': no checkpoint under '" + dir.path() + "'"),
                std::string::npos) << name << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find("pass a checkpoint file"), std::string::npos) << name << ": " << e.what();
    }
  }

  const auto path = regression_checkpoint(dir, /*weights_only=*/true);
  std::filesystem::create_directories(dir.file("checkpoints"));
  std::filesystem::copy_file(path, dir.file("checkpoints/last.ckpt"));
  const auto saved = CheckpointIO().load(path).child("state_dict").get_tensor("linear.weight");
  for (const auto& [name, evaluate] : evaluations) {
    Trainer trainer(quiet_options(dir.path()));
    torch::manual_seed(99);
    auto model = std::make_shared<TestableRegression>();
    ASSERT_FALSE(torch::equal(model->linear->weight, saved));
    evaluate(trainer, model);
    EXPECT_TRUE(torch::equal(model->linear->weight, saved)) << name << " did not load last.ckpt";
  }
}

TEST(TrainerCheckpoint, CheckpointDirFollowsTheFirstLoggersVersionDirectory) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  EXPECT_EQ(Trainer(options).checkpoint_dir(), std::filesystem::path(dir.path()) / "checkpoints");
  options.loggers = {"csv"};
  EXPECT_EQ(Trainer(options).checkpoint_dir(),
            std::filesystem::path(dir.path()) / "volt_logs" / "version_0" / "checkpoints");
}

TEST(TrainerCheckpoint, RemoveCheckpointDeletesTheFile) {
  TemporaryDirectory dir;
  const auto path = regression_checkpoint(dir);
  Trainer trainer(quiet_options(dir.path()));
  trainer.remove_checkpoint(path);
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace volt::testing

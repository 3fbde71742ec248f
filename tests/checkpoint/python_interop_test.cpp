// PyTorch reads volt's files: the reference PyTorch (testing::reference_python: 1.13 or 2.11, the
// version of this build's LibTorch) loads a Trainer
// checkpoint of the Fashion-MNIST CNN into a PyTorch twin of the model, which then computes the
// same logits; torch.optim.AdamW loads the optimizer state and steps with it; the weights file loads
// with weights_only=True and the checkpoint's pickle calls nothing but tensor rebuilding; and a
// state dict that Python saves loads back into volt.
#include <gtest/gtest.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <fstream>

#include "fashion_mnist/classifier.h"
#include "tests/support/regression_problem.h"
#include "tests/support/test_support.h"
#include "checkpoint/module_state.h"

namespace volt::testing {
namespace {

class RandomImages : public DataModule {
 public:
  RandomImages() {
    auto generator = at::detail::createCPUGenerator(9);
    auto images = torch::rand({64, 1, 28, 28}, generator);
    auto labels = torch::randint(0, 10, {64}, generator);
    train_ = std::make_shared<DataLoader>(std::make_shared<TensorDataset>(images, labels), DataLoaderOptions{.batch_size = 16});
  }
  std::shared_ptr<DataLoader> train_dataloader() override { return train_; }

 private:
  std::shared_ptr<DataLoader> train_;
};

TEST(PythonInterop, PyTorchLoadsVoltsCheckpointAndVoltLoadsPyTorchsStateDict) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.max_epochs = 1;
  options.seed = 4;
  auto model = std::make_shared<fashion_mnist::Classifier>();
  Trainer trainer(options);
  trainer.fit(model, std::make_shared<RandomImages>());
  trainer.save_checkpoint(dir.file("model.ckpt"));
  save_weights(*model, dir.file("weights.pt"));

  model->eval();
  torch::NoGradGuard no_grad;
  const auto x = torch::rand({8, 1, 28, 28}, at::detail::createCPUGenerator(5));
  StateDict reference;
  reference.set("x", x);
  reference.set("logits", model->forward(x));
  reference.set("global_step", trainer.global_step());
  const auto bytes = torch::pickle_save(reference.to_ivalue());
  std::ofstream(dir.file("reference.pt"), std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));

  const std::string script = std::string(VOLT_SOURCE_DIR) + "/tests/checkpoint/python/check_interop.py";
  const auto result = run_command(testing::reference_python() + " " + script + " " + dir.file("model.ckpt") + " " +
                                      dir.file("weights.pt") + " " + dir.file("reference.pt") + " " + dir.file("from_python.pt"),
                                  240);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("ok   module.load_state_dict(torch.load(weights file, weights_only=True))"), std::string::npos) << result.output;

  // Python halved every floating-point tensor; volt must read exactly that.
  fashion_mnist::Classifier from_python;
  load_weights(from_python, dir.file("from_python.pt"));
  const auto mine = module_state_dict(*model);
  const auto theirs = module_state_dict(from_python);
  for (const auto& key : mine.keys()) {
    const auto expected = mine.get_tensor(key).is_floating_point() ? mine.get_tensor(key) * 0.5 : mine.get_tensor(key);
    EXPECT_TRUE(torch::equal(theirs.get_tensor(key), expected)) << key;
  }
}

}  // namespace
}  // namespace volt::testing

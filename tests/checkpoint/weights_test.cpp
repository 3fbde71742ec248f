// save_weights / load_weights: a plain state dict under PyTorch's names that reads back exactly,
// from a weights file or a full checkpoint, with clear errors for another model.
#include <gtest/gtest.h>

#include "fashion_mnist/classifier.h"
#include "tests/support/test_support.h"
#include "checkpoint/checkpoint_io.h"
#include "checkpoint/module_state.h"

namespace volt::testing {
namespace {

torch::Tensor flat_state(const torch::nn::Module& module) {
  std::vector<torch::Tensor> flat;
  const auto state = module_state_dict(module);
  for (const auto& key : state.keys()) flat.push_back(state.get_tensor(key).to(torch::kDouble).flatten());
  return torch::cat(flat);
}

TEST(Weights, TheStateDictUsesPyTorchsNamesAndOrder) {
  fashion_mnist::Classifier model;
  const std::vector<std::string> expected{
      "features.0.weight",       "features.1.weight",       "features.1.bias",
      "features.1.running_mean", "features.1.running_var",  "features.1.num_batches_tracked",
      "features.4.weight",       "features.5.weight",       "features.5.bias",
      "features.5.running_mean", "features.5.running_var",  "features.5.num_batches_tracked",
      "head.1.weight",           "head.1.bias",             "head.4.weight",
      "head.4.bias"};
  EXPECT_EQ(module_state_dict(model).keys(), expected);
}

TEST(Weights, SaveThenLoadRestoresEveryParameterAndBuffer) {
  TemporaryDirectory dir;
  torch::manual_seed(1);
  fashion_mnist::Classifier original;
  {
    torch::NoGradGuard no_grad;
    for (auto& buffer : original.buffers()) buffer.add_(3);  // buffers too, not just parameters
  }
  save_weights(original, dir.file("weights.pt"));
  torch::manual_seed(2);
  fashion_mnist::Classifier copy;
  ASSERT_FALSE(torch::equal(flat_state(original), flat_state(copy)));
  load_weights(copy, dir.file("weights.pt"));
  EXPECT_TRUE(torch::equal(flat_state(original), flat_state(copy)));
  // The file is the state dict itself (what module.load_state_dict(torch.load(path)) expects).
  EXPECT_EQ(CheckpointIO().load(dir.file("weights.pt")).keys(), module_state_dict(original).keys());
}

TEST(Weights, LoadingAnotherModelNamesTheKeysUnlessNotStrict) {
  TemporaryDirectory dir;
  torch::nn::Sequential small(torch::nn::Linear(4, 3), torch::nn::ReLU(), torch::nn::Linear(3, 2));
  save_weights(*small, dir.file("small.pt"));
  torch::nn::Sequential other(torch::nn::Linear(4, 3), torch::nn::ReLU(), torch::nn::Linear(3, 5),
                              torch::nn::Linear(5, 1));
  try {
    load_weights(*other, dir.file("small.pt"));
    FAIL() << "expected CheckpointError";
  } catch (const CheckpointError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("missing keys (in the model, not in the checkpoint) (2): 3.weight, 3.bias"),
              std::string::npos) << message;
    EXPECT_NE(message.find("2.weight: checkpoint [2, 3], model [5, 3]"), std::string::npos) << message;
  }
  // Not strict: names on one side only are skipped, but a shape mismatch is still an error.
  torch::nn::Sequential longer(torch::nn::Linear(4, 3), torch::nn::ReLU(), torch::nn::Linear(3, 2),
                               torch::nn::Linear(2, 1));
  load_weights(*longer, dir.file("small.pt"), /*strict=*/false);
  EXPECT_TRUE(torch::equal(longer[2]->as<torch::nn::Linear>()->weight, small[2]->as<torch::nn::Linear>()->weight));
  EXPECT_THROW(load_weights(*other, dir.file("small.pt"), /*strict=*/false), CheckpointError);
}

}  // namespace
}  // namespace volt::testing

// fsdp's default (full) checkpoint of a model whose parameters all sit in auto-wrapped units, so
// that the root unit holds none (a Sequential of blocks with min_num_params: the common shape of a
// large model): the save writes every parameter under its name, with the optimizer's state, and
// the file loads into the model as it was when saved. Such a root unit once failed the save
// ("Expected a proper Tensor but got None").
#include <gtest/gtest.h>

#include "checkpoint/checkpoint_io.h"
#include "data/data_loader.h"
#include "data/dataset.h"
#include "tests/support/regression_problem.h"
#include "tests/support/test_support.h"
#include "trainer/trainer.h"
#include "strategies/strategy.h"

namespace volt::fsdp {
namespace {

class AllInSequential : public Module {
 public:
  AllInSequential() {
    net = register_module("net", torch::nn::Sequential(torch::nn::Linear(3, 4), torch::nn::Tanh(),
                                                       torch::nn::Linear(4, 1)));
  }
  torch::Tensor training_step(const Batch& batch, int64_t) override {
    return (net->forward(batch.input) - batch.target).square().mean();
  }
  OptimizerConfig configure_optimizers() override {
    return OptimizerConfig(std::make_shared<torch::optim::Adam>(parameters(), torch::optim::AdamOptions(0.01)));
  }
  torch::nn::Sequential net{nullptr};
};

// Saves at the end of training (the units still sharded) and records the parameters then.
class SaveAtTrainEnd : public Callback {
 public:
  explicit SaveAtTrainEnd(std::filesystem::path path) : path_(std::move(path)) {}
  void on_train_end(Trainer& trainer, Module& module) override {
    trainer.save_checkpoint(path_);
    saved = trainer.strategy().checkpointing().full_model_state_dict(module);
  }
  StateDict saved;

 private:
  std::filesystem::path path_;
};

TEST(FsdpFullSave, AModelWhoseRootUnitHoldsNoParameters) {
  testing::TemporaryDirectory dir;
  auto options = testing::quiet_options(dir.path());
  options.strategy = "fsdp:min_num_params=1";
  options.max_steps = 3;
  torch::manual_seed(0);
  auto module = std::make_shared<AllInSequential>();
  Trainer trainer(options);
  const auto path = std::filesystem::path(dir.path()) / "full.ckpt";
  auto save = std::make_shared<SaveAtTrainEnd>(path);
  trainer.add_callback(save);
  DataLoaderOptions loader;
  loader.batch_size = 4;
  trainer.fit(module, std::make_shared<DataLoader>(
                          std::make_shared<TensorDataset>(torch::randn({12, 3}), torch::randn({12, 1})), loader));

  const auto checkpoint = CheckpointIO().load(path);
  const auto state = checkpoint.child("state_dict");
  for (const char* name : {"net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias"}) {
    ASSERT_TRUE(state.contains(name)) << name;
    EXPECT_TRUE(torch::equal(state.get_tensor(name), save->saved.get_tensor(name))) << name;
    EXPECT_TRUE(torch::equal(state.get_tensor(name), module->named_parameters()[name].detach())) << name;
  }
  // Adam's state of each of the four parameters, in PyTorch's layout.
  const auto optimizer = StateDict::from_ivalue(checkpoint.at("optimizer_states").toListRef().at(0), "optimizer");
  EXPECT_EQ(optimizer.at("state").toGenericDict().size(), 4u);
}

}  // namespace
}  // namespace volt::fsdp

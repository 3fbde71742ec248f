// The Fabric in one process: accumulation windows counted as the Trainer counts them (the
// loader's last batch closing a short window) with the strategy's no_sync region held exactly on
// the other micro-batches; a GradScaler-skipped step reported and leaving the parameters alone;
// save/load round trips; and every misuse a ConfigurationError that says what to do.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <regex>
#include <sstream>
#include <tuple>

#include "distributed/network.h"
#include "precision/mixed_precision.h"
#include "strategies/single_device_strategy.h"
#include "tests/support/regression_problem.h"
#include "tests/support/test_support.h"
#include "fabric/fabric.h"

namespace volt::testing {
namespace {

class RegressionNet : public RegressionModule {
 public:
  using RegressionModule::RegressionModule;
  torch::Tensor forward(const torch::Tensor& x) { return predict_step(Batch{x, {}, {}}, 0); }
};

// Records, for every backward, whether it ran inside the strategy's no_sync region.
class NoSyncSpy : public SingleDeviceStrategy {
 public:
  NoSyncSpy() { hold(std::make_shared<Spy>(*this)); }
  bool in_no_sync = false;
  std::vector<bool> backward_in_no_sync;

 private:
  struct Spy : GradientSynchronization {
    explicit Spy(NoSyncSpy& owner) : GradientSynchronization(owner), spy(owner) {}
    ScopeGuard no_sync() override {
      spy.in_no_sync = true;
      return ScopeGuard([this] { spy.in_no_sync = false; });
    }
    void pre_backward(const torch::Tensor&) override { spy.backward_in_no_sync.push_back(spy.in_no_sync); }
    NoSyncSpy& spy;
  };
};

std::shared_ptr<DataLoader> loader_of(int64_t samples, int64_t batch_size) {
  DataLoaderOptions options;
  options.batch_size = batch_size;
  return std::make_shared<DataLoader>(regression_dataset(samples), options);
}

torch::Tensor squared_error(const torch::Tensor& prediction, const torch::Tensor& target) {
  return (prediction - target).square().mean();
}

// The Fabric's loader draws batches drawn in order from the loader's workers (a DeviceFeed over a
// BatchStream), and any other index starts over there: the batches are those of a loader
// without workers, whatever the order they are asked in.
TEST(FabricDataLoaderWorkers, GiveTheBatchesOfTheTrainingThreadInAnyOrderOfDrawing) {
  Fabric fabric(FabricOptions{});
  fabric.launch();
  DataLoaderOptions options{.batch_size = 3, .shuffle = true, .seed = 2};
  auto serial = fabric.setup_dataloader(std::make_shared<DataLoader>(regression_dataset(40), options));
  options.num_workers = 3;
  auto threaded = fabric.setup_dataloader(std::make_shared<DataLoader>(regression_dataset(40), options));
  for (const int64_t i : {0, 1, 2, 3, 9, 10, 4, 0, 1, 13, 13}) {
    EXPECT_TRUE(threaded->batch(i).input.equal(serial->batch(i).input)) << "batch " << i;
  }
}

TEST(FabricAccumulation, CountsWindowsLikeTheTrainerAndTheLastBatchClosesTheLastWindow) {
  auto spy = std::make_shared<NoSyncSpy>();
  Fabric fabric({}, TrainerComponents{spy, nullptr, nullptr});
  fabric.launch();
  auto model = std::make_shared<RegressionNet>();
  auto [module, optimizer] = fabric.setup(model, model->configure_optimizers().optimizers.at(0));
  auto loader = fabric.setup_dataloader(loader_of(10, 1));
  ASSERT_EQ(loader->num_batches(), 10);
  std::vector<int64_t> sizes, steps_after;
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    for (int64_t i = 0; i < loader->num_batches(); ++i) {
      const Batch batch = loader->batch(i);
      auto step = fabric.accumulate(4);
      if (epoch == 0) sizes.push_back(step.window_size());
      fabric.backward(squared_error(module->forward(batch.input), batch.target) / static_cast<double>(step.window_size()));
      if (step.syncing()) {
        EXPECT_TRUE(fabric.step(*optimizer));
        fabric.zero_grad(*optimizer);
        if (epoch == 0) steps_after.push_back(i);
      }
    }
    EXPECT_EQ(loader->epoch(), epoch) << "drawing batch 0 again starts the next epoch";
  }
  EXPECT_EQ(sizes, (std::vector<int64_t>{4, 4, 4, 4, 4, 4, 4, 4, 2, 2}));
  EXPECT_EQ(steps_after, (std::vector<int64_t>{3, 7, 9})) << "windows of 4 from the epoch's start; the last has 2";
  EXPECT_EQ(fabric.global_step(), 6);
  const std::vector<bool> one_epoch{true, true, true, false, true, true, true, false, true, false};
  std::vector<bool> both = one_epoch;
  both.insert(both.end(), one_epoch.begin(), one_epoch.end());
  EXPECT_EQ(spy->backward_in_no_sync, both) << "no_sync exactly on the micro-batches that do not close their window";

  // A loop limited to 7 batches an epoch (--limit-train-batches 7): the 7th closes a window of 3.
  Fabric limited({}, TrainerComponents{std::make_shared<NoSyncSpy>(), nullptr, nullptr});
  limited.launch();
  auto other = std::make_shared<RegressionNet>();
  auto [other_module, other_optimizer] = limited.setup(other, other->configure_optimizers().optimizers.at(0));
  auto limited_loader = limited.setup_dataloader(loader_of(10, 1), BatchLimit::count(7));
  ASSERT_EQ(limited_loader->num_batches(), 7);
  limited_loader->batch(6);
  const auto last = limited.accumulate(4);
  EXPECT_TRUE(last.syncing());
  EXPECT_EQ(last.window_size(), 3);
  EXPECT_EQ(last.position(), 2);
}

// The stand-in for 16-mixed on a CPU (LibTorch 1.13 has no float16 autocast there), as in
// tests/precision/amp_trainer_test.cpp: bf16 autocast with 16-mixed's GradScaler, whose skip logic
// is what 16-mixed runs.
TEST(FabricPrecision, ReportsAStepTheGradScalerSkippedAndLeavesTheParametersAlone) {
  auto precision = std::make_shared<MixedPrecision>(torch::kBFloat16, torch::kCPU, std::make_shared<GradScaler>());
  Fabric fabric({.precision = "bf16-mixed"}, TrainerComponents{nullptr, precision, nullptr});
  fabric.launch();
  torch::manual_seed(0);
  auto model = std::make_shared<RegressionNet>();
  auto [module, optimizer] = fabric.setup(model, model->configure_optimizers().optimizers.at(0));
  auto loader = fabric.setup_dataloader(loader_of(32, 8));
  std::vector<bool> took;
  for (int64_t i = 0; i < loader->num_batches(); ++i) {
    const Batch batch = loader->batch(i);
    auto loss = squared_error(module->forward(batch.input), batch.target);
    if (i == 1) loss = loss * std::numeric_limits<double>::infinity();
    fabric.backward(loss);
    // Clipping unscales first; the step's own unscale then does nothing (no double unscale).
    fabric.clip_gradients(*optimizer, 1.0);
    const auto before = model->flat_parameters().clone();
    took.push_back(fabric.step(*optimizer));
    if (i == 1) {
      EXPECT_TRUE(torch::equal(model->flat_parameters(), before)) << "a skipped step leaves the parameters";
      EXPECT_TRUE(fabric.last_step_skipped());
      EXPECT_EQ(precision->scaler()->get_scale(), 32768.0) << "the scale backs off after the skipped step";
    }
    fabric.zero_grad(*optimizer);
  }
  EXPECT_EQ(took, (std::vector<bool>{true, false, true, true}));
  EXPECT_EQ(fabric.skipped_steps(), 1);
  EXPECT_FALSE(fabric.last_step_skipped());
  EXPECT_EQ(fabric.global_step(), 4) << "a skipped step still counts, as in the Trainer";
  EXPECT_EQ(fabric.precision().metrics().at("amp_skipped_steps"), 1.0);
}

TEST(FabricPrecision, TheForwardRunsInsideThePrecisionsAutocast) {
  Fabric fabric({.precision = "bf16-mixed"});
  fabric.launch();
  auto model = std::make_shared<RegressionNet>();
  auto [module, optimizer] = fabric.setup(model, model->configure_optimizers().optimizers.at(0));
  const auto x = torch::randn({4, 8});
  EXPECT_EQ(module->forward(x).scalar_type(), torch::kBFloat16) << "the linear layer ran under bf16 autocast";
  EXPECT_EQ(model->forward(x).scalar_type(), torch::kFloat) << "outside the wrapper, no autocast";
}

// A one-process Fabric with the regression model (SGD with momentum, weights drawn from
// `weight_seed`) and a loader of 64 samples in batches of 8, set up.
struct FabricRun {
  explicit FabricRun(uint64_t weight_seed) {
    fabric.launch();
    torch::manual_seed(weight_seed);
    model = std::make_shared<RegressionNet>(RegressionOptions{.momentum = 0.9});
    std::tie(module, optimizer) = fabric.setup(model, model->configure_optimizers().optimizers.at(0));
    loader = fabric.setup_dataloader(loader_of(64, 8));
  }
  // One step per batch on batches [first, first + steps).
  void train(int64_t first, int64_t steps) {
    for (int64_t i = first; i < first + steps; ++i) {
      const Batch batch = loader->batch(i);
      fabric.backward(squared_error(module->forward(batch.input), batch.target));
      fabric.step(*optimizer);
      fabric.zero_grad(*optimizer);
    }
  }

  Fabric fabric{FabricOptions{}};
  std::shared_ptr<RegressionNet> model;
  std::shared_ptr<FabricModule<RegressionNet>> module;
  std::shared_ptr<torch::optim::Optimizer> optimizer;
  std::shared_ptr<FabricDataLoader> loader;
};

TEST(FabricCheckpoint, SaveAndLoadRestoreModelOptimizerValuesAndTheStepCount) {
  TemporaryDirectory dir;
  const std::string path = dir.file("run.ckpt");
  FabricRun first(1);
  first.train(0, 3);
  first.fabric.save(path, {{"model", first.module}, {"optimizer", first.optimizer}, {"epoch", int64_t{7}}});

  FabricRun second(2);
  ASSERT_FALSE(torch::equal(second.model->flat_parameters(), first.model->flat_parameters()));
  const StateDict values = second.fabric.load(path, {{"model", second.model}, {"optimizer", second.optimizer}});
  EXPECT_EQ(values.get_int("epoch"), 7);
  EXPECT_EQ(second.fabric.global_step(), 3);
  EXPECT_TRUE(torch::equal(second.model->flat_parameters(), first.model->flat_parameters()));
  // The momentum buffers came back too: the next steps agree bit for bit.
  first.train(3, 2);
  second.train(3, 2);
  EXPECT_TRUE(torch::equal(second.model->flat_parameters(), first.model->flat_parameters()));

  const auto missing = error_message_of<CheckpointError>([&] { second.fabric.load(path, {{"ema", second.model}}); });
  EXPECT_NE(missing.find("holds no item 'ema'"), std::string::npos) << missing;
  EXPECT_NE(missing.find("model, optimizer"), std::string::npos) << missing;
}

// save(..., in_background): the file holds the state at the call although the loop stepped on
// while it was written; finish_checkpoint_writes() (or the next load) waits for it.
TEST(FabricCheckpoint, SaveInTheBackgroundHoldsTheStateAtTheCall) {
  TemporaryDirectory dir;
  const std::string path = dir.file("run.ckpt");
  FabricRun first(1);
  first.train(0, 3);
  const auto at_save = first.model->flat_parameters().clone();
  first.fabric.save(path, {{"model", first.module}, {"optimizer", first.optimizer}}, /*in_background=*/true);
  first.train(3, 2);  // changes the parameters and momentum buffers the snapshot was taken from
  first.fabric.finish_checkpoint_writes();
  ASSERT_FALSE(torch::equal(first.model->flat_parameters(), at_save));

  FabricRun second(2);
  second.fabric.load(path, {{"model", second.model}, {"optimizer", second.optimizer}});
  EXPECT_EQ(second.fabric.global_step(), 3);
  EXPECT_TRUE(torch::equal(second.model->flat_parameters(), at_save));
  // The momentum of step 3 came back too: stepping on from there reproduces the first run.
  second.train(3, 2);
  EXPECT_TRUE(torch::equal(second.model->flat_parameters(), first.model->flat_parameters()));
}

// The shape the issue asks a user to be able to write, on one process (ddp with static_graph and
// bf16-mixed run there too).
struct Net : torch::nn::Module {
  Net() { linear = register_module("linear", torch::nn::Linear(8, 1)); }
  torch::Tensor forward(const torch::Tensor& x) { return linear->forward(x); }
  torch::nn::Linear linear{nullptr};
};

TEST(FabricShape, TheIssuesLoopTrainsOnDDPWithBF16MixedAndAccumulation) {
  TemporaryDirectory dir;
  volt::Fabric fabric({.strategy = "ddp:static_graph=true", .devices = 1, .precision = "bf16-mixed",
                       .master_port = find_free_port(), .seed = 5});
  fabric.launch();
  auto model = std::make_shared<Net>();
  auto [module, optimizer] = fabric.setup(model, std::make_shared<torch::optim::AdamW>(model->parameters()));
  auto loader = fabric.setup_dataloader(loader_of(40, 4));  // 10 batches: windows 4, 4, 2
  const auto initial = model->linear->weight.detach().clone();
  int64_t steps = 0;
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    for (int64_t i = 0; i < loader->num_batches(); ++i) {
      auto batch = loader->batch(i);
      auto step = fabric.accumulate(4);
      auto loss = squared_error(module->forward(batch.input).to(torch::kFloat), batch.target);
      fabric.backward(loss / step.window_size());
      if (step.syncing()) {
        fabric.clip_gradients(*optimizer, 1.0);
        EXPECT_TRUE(fabric.step(*optimizer));
        optimizer->zero_grad();
        ++steps;
      }
    }
  }
  EXPECT_EQ(steps, 9);
  EXPECT_EQ(fabric.global_step(), 9);
  EXPECT_FALSE(torch::equal(model->linear->weight, initial));
  fabric.save(dir.file("run.ckpt"), {{"model", model}, {"optimizer", optimizer}});
  // A full checkpoint loads into any strategy.
  auto reloaded = std::make_shared<Net>();
  Fabric other{FabricOptions{.strategy = "single_device", .precision = "bf16-mixed"}};
  other.launch();
  auto [other_module, other_optimizer] = other.setup(reloaded, std::make_shared<torch::optim::AdamW>(reloaded->parameters()));
  other.load(dir.file("run.ckpt"), {{"model", other_module}, {"optimizer", other_optimizer}});
  EXPECT_TRUE(torch::equal(reloaded->linear->weight, model->linear->weight));
}

// The lines of `text` from the first that starts with `first` to the first after it that starts
// with `last`, both included.
std::vector<std::string> lines_between(const std::string& text, const std::string& first, const std::string& last) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    inside = inside || line.rfind(first, 0) == 0;
    if (inside) lines.push_back(line);
    if (inside && line.rfind(last, 0) == 0) break;
  }
  return lines;
}

// docs/fabric.md's first example, on the two processes it asks for (volt's own launcher, started
// by fabric.launch()), in tests/fabric/worker/docs_fabric_loop.cpp, whose lines are the
// document's.
TEST(FabricShape, TheDocsExampleRunsAsWrittenOnTwoProcesses) {
  const std::string source_dir = VOLT_SOURCE_DIR;
  const auto documented = lines_between(file_text(source_dir + "/docs/fabric.md"), "volt::Fabric fabric(",
                                        "fabric.unwrap_module();");
  const auto compiled = lines_between(file_text(source_dir + "/tests/fabric/worker/docs_fabric_loop.cpp"),
                                      "volt::Fabric fabric(", "fabric.unwrap_module();");
  ASSERT_GE(documented.size(), 10u) << "docs/fabric.md's example was not found";
  EXPECT_EQ(compiled, documented) << "docs_fabric_loop.cpp must hold docs/fabric.md's example as written";

  TemporaryDirectory dir;
  const auto result =
      run_command("cd " + dir.path() + " && " + built_binary("tests/docs_fabric_loop"), 180);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  static const std::regex pattern("DOCS_LOOP rank=(\\d+) step=(\\d+) params=(\\S+)");
  std::map<int64_t, std::pair<int64_t, std::string>> ranks;
  for (std::sregex_iterator it(result.output.begin(), result.output.end(), pattern), end; it != end; ++it) {
    ranks[std::stoll((*it)[1])] = {std::stoll((*it)[2]), (*it)[3]};
  }
  ASSERT_EQ(ranks.size(), 2u) << "two processes, as the example asks:\n" << result.output;
  // 64 samples, batch 4, 2 ranks: 8 micro-batches a rank an epoch, windows of 4: 2 steps, 3 epochs.
  EXPECT_EQ(ranks.at(0).first, 6);
  EXPECT_EQ(ranks.at(1).first, 6);
  EXPECT_EQ(ranks.at(0).second, ranks.at(1).second) << "DDP: both ranks end with the same model";
  EXPECT_TRUE(std::filesystem::exists(dir.file("run.ckpt"))) << result.output;
}

TEST(FabricErrors, MisuseIsAConfigurationErrorThatSaysWhatToDo) {
  auto model = std::make_shared<RegressionNet>();
  auto sgd = model->configure_optimizers().optimizers.at(0);

  const auto unknown = configuration_error_of([] { Fabric fabric({.strategy = "dpp"}); });
  EXPECT_NE(unknown.find("ddp"), std::string::npos) << "the registry's error lists what is registered: " << unknown;

  Fabric fabric{FabricOptions{}};
  auto message = configuration_error_of([&] { fabric.setup(model, sgd); });
  EXPECT_NE(message.find("call fabric.launch() first"), std::string::npos) << message;
  fabric.launch();
  message = configuration_error_of([&] { fabric.step(*sgd); });
  EXPECT_NE(message.find("call fabric.setup(model, optimizer) first"), std::string::npos) << message;
  message = configuration_error_of([&] { fabric.backward(torch::ones({1}, torch::requires_grad())); });
  EXPECT_NE(message.find("call fabric.setup(model, optimizer) first"), std::string::npos) << message;

  auto stranger = std::make_shared<torch::optim::SGD>(std::vector<torch::Tensor>{torch::zeros({1}, torch::requires_grad())},
                                                      torch::optim::SGDOptions(0.1));
  message = configuration_error_of([&] { fabric.setup(model, stranger); });
  EXPECT_NE(message.find("not a parameter of the module"), std::string::npos) << message;
  // That setup_module went through; a second model is refused.
  message = configuration_error_of([&] { fabric.setup_module(std::make_shared<RegressionNet>()); });
  EXPECT_NE(message.find("a module is already set up"), std::string::npos) << message;
  auto optimizer = fabric.setup_optimizers({sgd}).front();
  message = configuration_error_of([&] { fabric.launch(); });
  EXPECT_NE(message.find("already launched"), std::string::npos) << message;
  message = configuration_error_of([&] { fabric.step(*stranger); });
  EXPECT_NE(message.find("was not set up"), std::string::npos) << message;
  message = configuration_error_of([&] { fabric.accumulate(2); });
  EXPECT_NE(message.find("no batch was drawn"), std::string::npos) << message;

  auto loader = fabric.setup_dataloader(loader_of(8, 2));
  message = configuration_error_of([&] { loader->batch(4); });
  EXPECT_NE(message.find("[0, 4)"), std::string::npos) << message;
  const Batch batch = loader->batch(0);
  message = configuration_error_of([&] { fabric.accumulate(0); });
  EXPECT_NE(message.find(">= 1"), std::string::npos) << message;
  {
    auto step = fabric.accumulate(2);
    ASSERT_FALSE(step.syncing());
    fabric.backward(squared_error(model->forward(batch.input), batch.target));
    message = configuration_error_of([&] { fabric.step(*optimizer); });
    EXPECT_NE(message.find("inside a no_sync region"), std::string::npos) << message;
  }
  EXPECT_TRUE(fabric.step(*optimizer)) << "outside the region the step goes ahead";
  message = configuration_error_of([&] { fabric.backward(torch::ones({1})); });
  EXPECT_NE(message.find("does not require grad"), std::string::npos) << message;

  // The end of the loop: the model is the user's again; driving it through the Fabric is refused.
  fabric.unwrap_module();
  message = configuration_error_of([&] { fabric.step(*optimizer); });
  EXPECT_NE(message.find("the loop has ended"), std::string::npos) << message;
  message = configuration_error_of([&] { fabric.save("/nonexistent/x.ckpt", {{"model", model}}); });
  EXPECT_NE(message.find("before fabric.unwrap_module()"), std::string::npos) << message;
  message = configuration_error_of([&] { fabric.unwrap_module(); });
  EXPECT_NE(message.find("the loop has ended"), std::string::npos) << message;
}

}  // namespace
}  // namespace volt::testing

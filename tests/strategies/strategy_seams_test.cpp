// The Strategy's seams, one process: the module reaches wrap_module already converted by the
// precision and on its device; the strategy chooses each rank's sampler, puts batches on the
// device in the precision's dtype, runs a step's forward inside its context; the gradients of an
// open accumulation window round-trip through the strategy; a process that must start local
// ranks without a launcher fails with a clear error.
#include <gtest/gtest.h>

#include "core/compat.h"
#include "distributed/cluster/cluster_environment.h"
#include "distributed/process_group_setup.h"
#include "precision/mixed_precision.h"
#include "precision/true_precision.h"
#include "strategies/single_device_strategy.h"
#include "tests/support/regression_problem.h"
#include "tests/support/test_doubles.h"

namespace volt {
namespace {

// Records what wrap_module sees; claims to be rank `rank` of `world` (no communication happens).
class RecordingStrategy : public SingleDeviceStrategy {
 public:
  RecordingStrategy(int64_t rank = 0, int64_t world = 1, bool equal_steps = false) {
    hold(std::make_shared<testing::FakeRankCollectives>(rank, world));
    hold(std::make_shared<EqualSteps>(*this, equal_steps));
  }
  std::vector<torch::Dtype> wrapped_dtypes;

 protected:
  void wrap_module(torch::nn::Module& module) override {
    for (const auto& p : module.parameters()) wrapped_dtypes.push_back(p.scalar_type());
  }

 private:
  struct EqualSteps : Placement {
    EqualSteps(Strategy& owner, bool equal) : Placement(owner), equal(equal) {}
    bool evaluation_needs_equal_steps() const override { return equal; }
    bool equal;
  };
};

std::shared_ptr<RecordingStrategy> prepared(std::shared_ptr<Precision> precision, int64_t rank = 0, int64_t world = 1,
                                            bool equal_steps = false) {
  auto strategy = std::make_shared<RecordingStrategy>(rank, world, equal_steps);
  strategy->setup_environment({});
  strategy->set_precision(std::move(precision));
  return strategy;
}

TEST(StrategySeams, WrapModuleSeesTheModuleAsThePrecisionConvertedIt) {
  auto strategy = prepared(std::make_shared<TruePrecision>(torch::kDouble));
  testing::RegressionModule module;
  strategy->setup_module(module);
  ASSERT_FALSE(strategy->wrapped_dtypes.empty());
  for (const auto dtype : strategy->wrapped_dtypes) EXPECT_EQ(dtype, torch::kDouble);
}

TEST(StrategySeams, BatchesReachTheDeviceInThePrecisionsDtype) {
  auto strategy = prepared(std::make_shared<TruePrecision>(torch::kDouble));
  const Batch batch = strategy->placement().batch_to_device(Batch{torch::ones({2, 3}), torch::zeros({2}, torch::kLong)});
  EXPECT_EQ(batch.input.scalar_type(), torch::kDouble);
  EXPECT_EQ(batch.target.scalar_type(), torch::kLong) << "integer targets keep their dtype";
  EXPECT_EQ(batch.input.device(), strategy->root_device());
}

TEST(StrategySeams, AStepsForwardRunsInsideThePrecisionsContext) {
  auto strategy = prepared(std::make_shared<MixedPrecision>(torch::kBFloat16, torch::kCPU));
  testing::RegressionModule module;
  bool autocast_inside = false;
  const auto out = strategy->run_step(RunningStage::Training, module, Batch{torch::ones({1, 8}), torch::ones({1})},
                                      [&](torch::nn::Module& m, const Batch& b) {
                                        EXPECT_EQ(&m, &module);
                                        autocast_inside = compat::autocast_enabled(torch::kCPU);
                                        return b.input.sum();
                                      });
  EXPECT_TRUE(autocast_inside);
  EXPECT_FALSE(compat::autocast_enabled(torch::kCPU)) << "the context ends with the step";
  EXPECT_EQ(out.item<double>(), 8.0);
}

std::vector<int64_t> indices_of(const DataLoader& loader) { return loader.sampler().indices(0); }

TEST(StrategySeams, OneProcessKeepsTheUsersLoader) {
  auto strategy = prepared(std::make_shared<Precision>());
  auto loader = std::make_shared<DataLoader>(testing::regression_dataset(10), DataLoaderOptions{.batch_size = 2});
  EXPECT_EQ(strategy->placement().distribute_loader(loader, RunningStage::Training), loader);
  EXPECT_EQ(strategy->placement().distribute_loader(loader, RunningStage::Validating), loader);
}

TEST(StrategySeams, RanksGetEqualTrainingSharesAndEvaluationSplitsByTheStrategysNeed) {
  auto loader = std::make_shared<DataLoader>(testing::regression_dataset(7), DataLoaderOptions{.batch_size = 2});
  // Rank 1 of 2 over 7 samples: training pads to 4 each; evaluation splits 4/3 unpadded (every
  // sample once), or pads to 4/4 when the strategy's evaluation forward has collectives.
  auto plain = prepared(std::make_shared<Precision>(), 1, 2);
  EXPECT_EQ(indices_of(*plain->placement().distribute_loader(loader, RunningStage::Training)).size(), 4u);
  EXPECT_EQ(indices_of(*plain->placement().distribute_loader(loader, RunningStage::Validating)), (std::vector<int64_t>{1, 3, 5}));
  auto sharded = prepared(std::make_shared<Precision>(), 1, 2, /*equal_steps=*/true);
  EXPECT_EQ(indices_of(*sharded->placement().distribute_loader(loader, RunningStage::Validating)),
            (std::vector<int64_t>{1, 3, 5, 0}));
  EXPECT_EQ(indices_of(*loader), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6})) << "the user's loader is unchanged";
}

TEST(StrategySeams, TheOpenWindowsGradientsRoundTripThroughTheStrategy) {
  auto strategy = prepared(std::make_shared<Precision>());
  testing::RegressionModule module;
  module.linear->weight.mutable_grad() = torch::full_like(module.linear->weight, 0.5);
  const StateDict section = strategy->checkpointing().accumulated_gradients(module, CheckpointLayout::Full);
  ASSERT_TRUE(section.contains("accumulated_grads"));
  EXPECT_FALSE(section.child("accumulated_grads").contains("linear.bias")) << "no gradient, no entry";

  testing::RegressionModule restored;
  restored.linear->bias.mutable_grad() = torch::ones_like(restored.linear->bias);
  strategy->checkpointing().load_accumulated_gradients(restored, section, "test");
  EXPECT_TRUE(torch::equal(restored.linear->weight.grad(), module.linear->weight.grad()));
  EXPECT_FALSE(restored.linear->bias.grad().defined()) << "a gradient the window did not have is cleared";
}

TEST(StrategySeams, StartingLocalRanksWithoutALauncherIsAClearError) {
  const auto cluster = make_cluster_environment("volt", {}, ClusterRequest{.devices = 2});
  try {
    start_process_group(*cluster, std::chrono::seconds(5), torch::kCPU, nullptr);
    FAIL() << "expected a ConfigurationError";
  } catch (const ConfigurationError& e) {
    EXPECT_NE(std::string(e.what()).find("no ProcessLauncher"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace volt

// The sharded layout's mechanics, with a strategy that declares it on one process: a directory
// with one file per rank, written atomically (also over an existing checkpoint), resumed bit for
// bit by the same strategy, and by another one from its shards put together.
#include "strategies/single_device_strategy.h"
#include "tests/support/test_doubles.h"
#include "tests/checkpoint/checkpoint_test_support.h"

namespace volt::testing {
namespace {

namespace fs = std::filesystem;

class ShardingStrategy : public SingleDeviceStrategy {
 public:
  explicit ShardingStrategy(int64_t world_size = 1) {
    hold(std::make_shared<CheckpointState>(*this, CheckpointLayout::Sharded));
    hold(std::make_shared<FakeRankCollectives>(0, world_size));
  }
  std::string name() const override { return "sharding_test"; }
};

torch::Tensor fit(const std::string& root, std::shared_ptr<Strategy> strategy, std::shared_ptr<Callback> callback,
                  const std::string& ckpt_path, uint64_t init_seed = 1) {
  auto options = quiet_options(root);
  options.max_epochs = 2;
  options.seed = 3;
  torch::manual_seed(init_seed);
  auto model = std::make_shared<RegressionModule>(RegressionOptions{.adam = true, .dropout = 0.1});
  Trainer trainer(options, std::move(strategy));
  if (callback) trainer.add_callback(callback);
  try {
    trainer.fit(model, std::make_shared<RegressionData>(64, 8, true, 2), ckpt_path);
  } catch (const Interrupted&) {
  }
  return model->flat_parameters();
}


TEST(ShardedLayout, WritesADirectoryOfShardsAndResumesBitwise) {
  TemporaryDirectory dir;
  const fs::path path = dir.file("checkpoints/step.ckpt");
  const auto reference = fit(dir.path(), std::make_shared<ShardingStrategy>(), nullptr, "");
  fit(dir.path(), std::make_shared<ShardingStrategy>(),
      std::make_shared<SaveAndInterrupt>(path, SavePoint::TrainBatchEnd, 1, 2), "");
  ASSERT_TRUE(fs::is_directory(path));
  EXPECT_EQ(directory_entries(path), std::vector<std::string>{"shard_0.ckpt"});
  EXPECT_EQ(directory_entries(path.parent_path()), std::vector<std::string>{"step.ckpt"}) << "a temporary directory was left";
  const auto shard = CheckpointIO().load(path / "shard_0.ckpt");
  EXPECT_EQ(shard.get_string("layout"), "sharded");
  EXPECT_EQ(shard.child("shard").get_int("world_size"), 1);

  const auto resumed = fit(dir.path(), std::make_shared<ShardingStrategy>(), nullptr, path.string(), 2);
  EXPECT_TRUE(torch::equal(resumed, reference));
}

TEST(ShardedLayout, ASecondSaveReplacesTheDirectoryWhole) {
  TemporaryDirectory dir;
  const fs::path path = dir.file("last.ckpt");
  auto saver = std::make_shared<SaveAndInterrupt>(path, SavePoint::TrainBatchEnd, 0, 1, /*keep_going=*/true);
  auto later = std::make_shared<SaveAndInterrupt>(path, SavePoint::TrainBatchEnd, 1, 5);
  auto options = quiet_options(dir.path());
  options.max_epochs = 2;
  Trainer trainer(options, std::make_shared<ShardingStrategy>());
  trainer.add_callback(saver);
  trainer.add_callback(later);
  auto model = std::make_shared<RegressionModule>();
  EXPECT_THROW(trainer.fit(model, std::make_shared<RegressionData>(64, 8)), Interrupted);
  EXPECT_EQ(CheckpointIO().load(path / "shard_0.ckpt").get_int("global_step"), 8 + 6);
  EXPECT_EQ(directory_entries(dir.path()), std::vector<std::string>{"last.ckpt"});
}

// Another strategy puts the shards together (Note [Reading a sharded checkpoint anywhere]) and
// resumes exactly; a shard without its index (a Fabric checkpoint's) is refused, naming the file.
TEST(ShardedLayout, AnotherStrategyResumesItPutTogether) {
  TemporaryDirectory dir;
  const fs::path path = dir.file("sharded.ckpt");
  const auto reference = fit(dir.path(), std::make_shared<ShardingStrategy>(), nullptr, "");
  fit(dir.path(), std::make_shared<ShardingStrategy>(), std::make_shared<SaveAndInterrupt>(path, SavePoint::TrainBatchEnd, 0, 3), "");
  EXPECT_TRUE(torch::equal(fit(dir.path(), std::make_shared<SingleDeviceStrategy>(), nullptr, path.string(), 2), reference));

  auto shard = CheckpointIO().load(path / "shard_0.ckpt");
  shard.erase("shard_index");
  CheckpointIO().save(shard, path / "shard_0.ckpt");
  try {
    fit(dir.path(), std::make_shared<SingleDeviceStrategy>(), nullptr, path.string());
    ADD_FAILURE() << "expected CheckpointError";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("shard_0.ckpt: has no shard index"), std::string::npos) << e.what();
  }
  // The strategy and world size that wrote it still load it.
  EXPECT_TRUE(torch::equal(fit(dir.path(), std::make_shared<ShardingStrategy>(), nullptr, path.string(), 2), reference));
}

TEST(ShardedLayout, AFullCheckpointLoadsIntoAShardingStrategy) {
  TemporaryDirectory dir;
  const fs::path path = dir.file("full.ckpt");
  const auto reference = fit(dir.path(), std::make_shared<SingleDeviceStrategy>(), nullptr, "");
  fit(dir.path(), std::make_shared<SingleDeviceStrategy>(),
      std::make_shared<SaveAndInterrupt>(path, SavePoint::TrainBatchEnd, 0, 5), "");
  ASSERT_TRUE(fs::is_regular_file(path));
  EXPECT_TRUE(torch::equal(fit(dir.path(), std::make_shared<ShardingStrategy>(), nullptr, path.string(), 2), reference));
}

}  // namespace
}  // namespace volt::testing

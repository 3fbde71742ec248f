// Checkpoints written in the background from a model on the GPU (Note [Checkpoints written in the
// background]): the snapshot copies the device tensors to host memory before the next step runs,
// so every file holds, value for value, what a synchronous save writes at the same step (that
// file keeps the tensors on cuda:0; the snapshot's are host tensors), and a fit resumed from the
// last one continues exactly as from the synchronous one.
#include <gtest/gtest.h>

#include "callbacks/model_checkpoint.h"
#include "checkpoint/checkpoint_io.h"
#include "tests/checkpoint/checkpoint_test_support.h"
#include "tests/cuda/cuda_test_support.h"

namespace volt::testing {
namespace {

namespace fs = std::filesystem;

// 2 epochs of 6 steps on cuda:0 (momentum SGD), a checkpoint after every step; the parameters at
// the end.
torch::Tensor fit_on_cuda(const fs::path& root, bool async, const std::string& resume_from = "", int64_t epochs = 2) {
  auto options = quiet_options(root.string());
  options.max_epochs = epochs;
  options.accelerator = "cuda";
  torch::manual_seed(0);
  auto module = std::make_shared<RegressionModule>(RegressionOptions{.momentum = 0.9});
  Trainer trainer(options);
  ModelCheckpointOptions checkpoint_options;
  checkpoint_options.dirpath = (root / "checkpoints").string();
  checkpoint_options.every_n_train_steps = 1;
  checkpoint_options.save_top_k = -1;
  checkpoint_options.async_write = async;
  trainer.add_callback(std::make_shared<ModelCheckpoint>(checkpoint_options));
  trainer.fit(module, std::make_shared<RegressionData>(48, 8), resume_from);
  return module->flat_parameters().cpu();
}

TEST(CudaBackgroundCheckpoint, EveryFileHoldsWhatASynchronousSaveWritesAndResumesAlike) {
  VOLT_REQUIRE_CUDA();
  TemporaryDirectory sync_dir, async_dir;
  fit_on_cuda(sync_dir.path(), false);
  fit_on_cuda(async_dir.path(), true);
  const auto names = directory_entries(sync_dir.file("checkpoints"));
  ASSERT_EQ(names.size(), 12u);
  ASSERT_EQ(directory_entries(async_dir.file("checkpoints")), names);
  for (const auto& name : names) {
    auto expected = read_checkpoint_file(fs::path(sync_dir.file("checkpoints")) / name);
    auto got = read_checkpoint_file(fs::path(async_dir.file("checkpoints")) / name);
    expected.erase("callbacks");  // names each run's own directory
    got.erase("callbacks");
    EXPECT_EQ(checkpoint_difference(got.to_ivalue(), expected.to_ivalue(), name), "");
  }
  // Resumed on the GPU from the step-7 file of each run, a third epoch ends alike.
  TemporaryDirectory from_sync, from_async;
  const auto a = fit_on_cuda(from_sync.path(), false, sync_dir.file("checkpoints/epoch=1-step=7.ckpt"), 3);
  const auto b = fit_on_cuda(from_async.path(), false, async_dir.file("checkpoints/epoch=1-step=7.ckpt"), 3);
  EXPECT_TRUE(torch::equal(a, b)) << "max difference " << (a - b).abs().max().item<double>();
}

}  // namespace
}  // namespace volt::testing

// Batches uploaded during the step (Note [Uploading the next batch during the step]): with pinned
// batches on cuda:0 the Trainer and the Fabric's loader upload batch i+1 on a copy stream while
// step i runs, and train bit for bit as with pageable batches uploaded one at a time; the batches
// a loader pins are in page-locked memory. Skipped without a CUDA device (cuda_test_support.h).
#include <gtest/gtest.h>

#include "tests/cuda/cuda_test_support.h"
#include "tests/support/regression_problem.h"
#include "tests/support/test_support.h"

namespace volt::testing {
namespace {

torch::Tensor train_on_cuda(bool pin_memory, int64_t workers) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.accelerator = "cuda";
  options.max_epochs = 2;
  options.seed = 3;
  torch::manual_seed(3);
  auto model = std::make_shared<RegressionModule>(RegressionOptions{.adam = true, .dropout = 0.1});
  auto data = regression_dataset(96, 8, 4);
  DataLoaderOptions loader{.batch_size = 8, .shuffle = true, .num_workers = workers, .pin_memory = pin_memory};
  auto train = std::make_shared<DataLoader>(data, loader);
  loader.shuffle = false;
  auto val = std::make_shared<DataLoader>(data, loader);
  Trainer trainer(options);
  trainer.fit(model, train, val);
  return model->flat_parameters().cpu();
}

TEST(CudaDeviceFeed, PinnedBatchesUploadedDuringTheStepTrainAsPageableOnes) {
  VOLT_REQUIRE_CUDA();
  const auto reference = train_on_cuda(/*pin_memory=*/false, /*workers=*/0);
  EXPECT_TRUE(train_on_cuda(true, 0).equal(reference));
  EXPECT_TRUE(train_on_cuda(true, 3).equal(reference));
}

TEST(CudaDeviceFeed, ALoaderThatPinsBuildsItsBatchesInPageLockedMemory) {
  VOLT_REQUIRE_CUDA();
  DataLoader loader(regression_dataset(32, 8, 1), {.batch_size = 8, .shuffle = true, .num_workers = 2, .pin_memory = true});
  ASSERT_TRUE(loader.pins_memory());
  BatchStream stream = loader.stream(0, loader.num_batches());
  while (stream.has_next()) {
    const Batch batch = stream.next();
    EXPECT_TRUE(batch.input.is_pinned() && batch.target.is_pinned());
  }
}

}  // namespace
}  // namespace volt::testing

// A training step on cuda:0 never waits for the device: no item(), no copy to the host, no stream
// synchronization between one batch's start and its end, so that the host runs ahead of the GPU
// as a raw LibTorch loop does (docs/benchmarks.md, "volt against PyTorch Lightning"). LibTorch's
// sync debug mode turns every synchronizing call into an error inside the checked steps; the
// error names the call. Strategies by name on one rank (NCCL), in float32 and bf16-mixed.
// Skipped without a CUDA device (cuda_test_support.h).
#include <gtest/gtest.h>

#include "tests/cuda/cuda_test_support.h"
#include "tests/support/test_support.h"
#include "tests/support/regression_problem.h"
#include "trainer/volt.h"

#if defined(VOLT_WITH_CUDA)
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace volt::testing {
namespace {

#if defined(VOLT_WITH_CUDA)
void set_sync_errors(bool on) {
  c10::cuda::warning_state().set_sync_debug_mode(on ? c10::cuda::SyncDebugMode::L_ERROR
                                                    : c10::cuda::SyncDebugMode::L_DISABLED);
}
#else
void set_sync_errors(bool) {}
#endif

// A two-layer network trained with FusedAdamW; logs nothing (a logged value is read when the
// logger writes it, which is a synchronization by design).
class QuietMlp : public Module {
 public:
  QuietMlp() {
    first = register_module("first", torch::nn::Linear(32, 64));
    second = register_module("second", torch::nn::Linear(64, 4));
  }
  torch::Tensor training_step(const Batch& batch, int64_t) override {
    const auto output = second->forward(torch::relu(first->forward(batch.input)));
    return torch::mse_loss(output.to(torch::kFloat), batch.target);
  }
  OptimizerConfig configure_optimizers() override {
    return std::make_shared<FusedAdamW>(parameters(), torch::optim::AdamWOptions(1e-3));
  }
  torch::nn::Linear first{nullptr}, second{nullptr};
};

// Device synchronizations are errors from the start of batch 2 to the end of each batch after it
// (the first batches create the optimizer state and the strategies' buffers).
class ForbidSynchronization : public Callback {
 public:
  void on_train_batch_start(Trainer&, Module&, const Batch&, int64_t batch_idx) override {
    if (batch_idx >= 2) set_sync_errors(true);
  }
  void on_train_batch_end(Trainer&, Module&, const torch::Tensor&, const Batch&, int64_t) override {
    set_sync_errors(false);
  }
};

TEST(CudaStepSynchronization, NoStrategyWaitsForTheDeviceInsideATrainingStep) {
  VOLT_REQUIRE_CUDA();
  for (const std::string strategy : {"single_device", "ddp", "ddp:gradient_as_bucket_view=true", "fsdp"}) {
    for (const std::string precision : {"32-true", "bf16-mixed"}) {
      TemporaryDirectory dir;
      auto options = quiet_options(dir.path());
      options.accelerator = "cuda";
      options.devices = 1;
      options.strategy = strategy;
      options.precision = precision;
      options.max_steps = 6;
      torch::manual_seed(0);
      const auto x = torch::randn({48, 32}, torch::kCUDA), y = torch::randn({48, 4}, torch::kCUDA);
      auto loader = std::make_shared<DataLoader>(std::make_shared<TensorDataset>(x, y),
                                                 DataLoaderOptions{.batch_size = 8});
      Trainer trainer(options);
      trainer.add_callback(std::make_shared<ForbidSynchronization>());
      try {
        trainer.fit(std::make_shared<QuietMlp>(), loader);
      } catch (const std::exception& e) {
        set_sync_errors(false);
        ADD_FAILURE() << strategy << ", " << precision << ": the step synchronized with the device:\n" << e.what();
      }
      set_sync_errors(false);
      EXPECT_EQ(trainer.global_step(), 6) << strategy << ", " << precision;
    }
  }
}

}  // namespace
}  // namespace volt::testing

// The Trainer on cuda:0 (single_device): float32 trains like the CPU; 16-mixed and bf16-mixed run
// the step under CUDA autocast in their dtype; a float16 step that really overflows is skipped by
// the GradScaler (scale halved, the step-interval scheduler held) and the scale grows again after
// growth_interval clean steps; a mid-epoch resume with dropout (CUDA random numbers) is bitwise
// the uninterrupted run. Skipped without a CUDA device (cuda_test_support.h).
#include <gtest/gtest.h>

#include <set>

#include "checkpoint/checkpoint_io.h"
#include "precision/mixed_precision.h"
#include "tests/checkpoint/checkpoint_test_support.h"
#include "tests/cuda/cuda_test_support.h"

namespace volt::testing {
namespace {

// Notes the dtype of the linear layer's output on every training step; multiplies the inputs of
// the batches in `overflow` by 1e4, so that their float16 gradients overflow once scaled (an
// output error of ~1e3-1e4 times a scale of 65536 is past float16's 65504).
class ObservedRegression : public RegressionModule {
 public:
  ObservedRegression(RegressionOptions options, std::set<int64_t> overflow)
      : RegressionModule(std::move(options)), overflow_(std::move(overflow)) {}
  torch::Tensor training_step(const Batch& batch, int64_t batch_idx) override {
    Batch b = batch;
    if (overflow_.count(batch_idx)) b.input = b.input * 1e4;
    output_dtypes.insert(linear->forward(b.input).scalar_type());
    devices.insert(b.input.device().str());
    return RegressionModule::training_step(b, batch_idx);
  }
  std::set<c10::ScalarType> output_dtypes;
  std::set<std::string> devices;

 private:
  std::set<int64_t> overflow_;
};

// A GradScaler that starts at 256 and grows every 3 clean steps. PyTorch's default start,
// 65536, already overflows the regression's clean gradients in float16 (seen on an H200: five of
// 16 steps skipped), which would hide the designed overflow among natural ones.
std::shared_ptr<MixedPrecision> float16_precision() {
  return std::make_shared<MixedPrecision>(
      torch::kHalf, torch::kCUDA,
      std::make_shared<GradScaler>(GradScalerOptions{.init_scale = 256.0, .growth_interval = 3}));
}

struct CudaRun {
  std::string accelerator = "cuda";
  std::string precision = "32-true";
  std::set<int64_t> overflow;
  std::shared_ptr<MixedPrecision> precision_object;  // set: passed to the Trainer
};

struct CudaOutcome {
  torch::Tensor weights;  // on the CPU
  std::set<c10::ScalarType> output_dtypes;
  std::set<std::string> devices;
  double lr = 0;
};

CudaOutcome train(const CudaRun& run) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.accelerator = run.accelerator;
  options.precision = run.precision;
  options.max_epochs = 2;
  torch::manual_seed(0);
  auto model = std::make_shared<ObservedRegression>(RegressionOptions{.momentum = 0.9, .step_scheduler = true},
                                                    run.overflow);
  auto trainer = run.precision_object ? std::make_unique<Trainer>(options, nullptr, run.precision_object)
                                      : std::make_unique<Trainer>(options);
  trainer->fit(model, std::make_shared<RegressionData>(64, 8));  // 8 batches an epoch
  return {model->flat_parameters().cpu(), model->output_dtypes, model->devices,
          trainer->optimizers()[0]->param_groups()[0].options().get_lr()};
}

double relative_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).norm() / b.norm()).item<double>();
}

TEST(CudaTraining, Float32OnCudaTrainsLikeTheCpu) {
  VOLT_REQUIRE_CUDA();
  const auto gpu = train({});
  const auto cpu = train({.accelerator = "cpu"});
  EXPECT_EQ(gpu.devices, std::set<std::string>{"cuda:0"}) << "the batches were not moved to cuda:0";
  EXPECT_EQ(gpu.output_dtypes, std::set<c10::ScalarType>{torch::kFloat});
  EXPECT_LT(relative_difference(gpu.weights, cpu.weights), 1e-5);
}

TEST(CudaTraining, MixedPrecisionsRunTheStepUnderCudaAutocastInTheirDtype) {
  VOLT_REQUIRE_CUDA();
  const auto reference = train({});
  for (const auto& [precision, dtype] : {std::pair{"16-mixed", torch::kHalf}, std::pair{"bf16-mixed", torch::kBFloat16}}) {
    const auto run = train({.precision = precision,
                            .precision_object = dtype == torch::kHalf ? float16_precision() : nullptr});
    EXPECT_EQ(run.output_dtypes, std::set<c10::ScalarType>{dtype}) << precision;
    EXPECT_TRUE(torch::isfinite(run.weights).all().item<bool>()) << precision;
    // 16-bit matrix products, float32 weights: close to the float32 run, not equal.
    EXPECT_LT(relative_difference(run.weights, reference.weights), 2e-2) << precision;
  }
}

TEST(CudaGradScaler, ARealFloat16OverflowSkipsTheStepHalvesTheScaleAndHoldsTheScheduler) {
  VOLT_REQUIRE_CUDA();
  const auto clean_precision = float16_precision();
  const auto clean = train({.precision = "16-mixed", .precision_object = clean_precision});
  const auto overflowing_precision = float16_precision();
  const auto overflowing = train({.precision = "16-mixed", .overflow = {2}, .precision_object = overflowing_precision});
  const auto& clean_scaler = *clean_precision->scaler();
  const auto& scaler = *overflowing_precision->scaler();
  EXPECT_EQ(clean_scaler.skipped_steps(), 0);
  EXPECT_EQ(scaler.skipped_steps(), 2) << "batch 2 of each epoch overflows in float16 and is skipped";
  // 16 iterations: the clean run grows 5 times (every 3 clean steps); the other backs off twice
  // and grows after each run of 3 clean steps: 2, (3 3) | 2 skip, ... — counted below.
  EXPECT_EQ(clean_scaler.get_scale(), 256.0 * 32);
  int64_t growths = 0, finite_in_a_row = 0;
  for (int64_t i = 0; i < 16; ++i) {
    if (i % 8 == 2) {
      finite_in_a_row = 0;
      continue;
    }
    if (++finite_in_a_row == 3) {
      ++growths;
      finite_in_a_row = 0;
    }
  }
  EXPECT_EQ(scaler.get_scale(), 256.0 * std::pow(2.0, static_cast<double>(growths)) / 4);
  // A skipped step does not advance the step-interval scheduler (StepLR, gamma 0.5 per step).
  EXPECT_EQ(overflowing.lr, clean.lr * 4) << "two skipped steps: two halvings fewer";
}

// The mid-epoch resume of tests/checkpoint/resume_test.cpp on cuda:0: dropout draws from the CUDA
// generator, whose state the checkpoint carries.
std::pair<torch::Tensor, int64_t> fit_with_dropout(const std::string& root, uint64_t init_seed,
                                                   std::shared_ptr<Callback> callback, const std::string& ckpt_path,
                                                   uint64_t trainer_seed = 11) {
  auto options = quiet_options(root);
  options.accelerator = "cuda";
  options.max_epochs = 3;
  options.seed = trainer_seed;
  torch::manual_seed(init_seed);
  auto model = std::make_shared<RecordingRegression>(RegressionOptions{.adam = true, .dropout = 0.3});
  Trainer trainer(options);
  if (callback) trainer.add_callback(callback);
  try {
    trainer.fit(model, std::make_shared<RegressionData>(96, 8, /*shuffle=*/true, 3), ckpt_path);
  } catch (const Interrupted&) {
  }
  return {model->flat_parameters().cpu(), static_cast<int64_t>(model->batch_sums.size())};
}

TEST(CudaResume, AMidEpochResumeWithDropoutIsBitwiseTheUninterruptedRun) {
  VOLT_REQUIRE_CUDA();
  TemporaryDirectory dir;
  const auto path = dir.file("interrupted.ckpt");
  const auto reference = fit_with_dropout(dir.path(), 1, nullptr, "");
  // The random numbers matter: another seed draws other dropout masks (and another order).
  ASSERT_FALSE(torch::equal(fit_with_dropout(dir.path(), 1, nullptr, "", 12).first, reference.first));
  auto saver = std::make_shared<SaveAndInterrupt>(path, SavePoint::TrainBatchEnd, 1, 4);
  const auto first = fit_with_dropout(dir.path(), 1, saver, "");
  ASSERT_TRUE(saver->fired);
  const auto checkpoint = read_checkpoint_file(path);
  ASSERT_TRUE(checkpoint.child("rng_states").contains("torch.cuda")) << "the CUDA generators' states are saved";
  // Different initial weights: everything that matters must come from the checkpoint.
  const auto resumed = fit_with_dropout(dir.path(), 2, nullptr, path);
  EXPECT_EQ(first.second + resumed.second, reference.second) << "batches repeated or skipped";
  EXPECT_TRUE(torch::equal(resumed.first, reference.first))
      << "max difference " << (resumed.first - reference.first).abs().max().item<double>();
}

}  // namespace
}  // namespace volt::testing

// A dataset already on the GPU (Note [Batches of tensors on the GPU]): a shuffled loader's
// batches gather through an index uploaded asynchronously, an unshuffled one's are slices; both
// are the CPU dataset's rows, on the GPU.
TEST(CudaData, ATensorDatasetOnTheGpuGivesTheCpuRowsInEveryOrder) {
  VOLT_REQUIRE_CUDA();
  const auto input = torch::randn({100, 3});
  const auto target = torch::randint(10, {100});
  const torch::Device gpu(torch::kCUDA, 0);
  for (const bool shuffle : {false, true}) {
    const volt::DataLoaderOptions options{.batch_size = 16, .shuffle = shuffle, .seed = 7};
    volt::DataLoader on_cpu(std::make_shared<volt::TensorDataset>(input, target), options);
    volt::DataLoader on_gpu(std::make_shared<volt::TensorDataset>(input.to(gpu), target.to(gpu)), options);
    for (int64_t i = 0; i < on_cpu.num_batches(); ++i) {
      const auto expected = on_cpu.batch(i);
      const auto got = on_gpu.batch(i);
      ASSERT_TRUE(got.input.is_cuda() && got.target.is_cuda()) << "batch " << i << " left the GPU";
      EXPECT_TRUE(got.input.cpu().equal(expected.input)) << "shuffle " << shuffle << ", batch " << i;
      EXPECT_TRUE(got.target.cpu().equal(expected.target)) << "shuffle " << shuffle << ", batch " << i;
    }
  }
}

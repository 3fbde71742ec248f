// Loss scaling on a real float16 overflow, against PyTorch's own torch.amp.GradScaler in the
// reference Python (tests/cuda/python/grad_scaler_reference.py; on the GPU machine its own
// python3): the same Linear(8, 1), initial weights and 16 batches, two of them scaled by 1e4 so
// that their float16 gradients overflow. volt's Trainer under 16-mixed (growth_interval 3) and
// PyTorch's loop must take the same decision at every step (skip or step, and the scale after
// it), hold the scheduler on a skipped step alike, and end with the same weights. Skipped
// without a CUDA device.
#include <gtest/gtest.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <fstream>
#include <regex>

#include "precision/mixed_precision.h"
#include "tests/cuda/cuda_test_support.h"
#include "tests/distributed/worker_runs.h"
#include "tests/support/regression_problem.h"
#include "trainer/volt.h"

namespace volt::testing {
namespace {

constexpr int64_t kBatches = 16, kBatchSize = 8, kGrowthInterval = 3;

struct Line : Module {
  torch::nn::Linear linear{nullptr};
  Line() { linear = register_module("linear", torch::nn::Linear(8, 1)); }
  torch::Tensor training_step(const Batch& batch, int64_t) override {
    return (linear->forward(batch.input) - batch.target).square().mean();
  }
  OptimizerConfig configure_optimizers() override {
    auto sgd = std::make_shared<torch::optim::SGD>(parameters(), 0.01);
    return {sgd, {std::make_shared<StepLR>(*sgd, 1, 0.9), SchedulerInterval::Step}};
  }
};

struct Decision {
  double scale = 0;
  bool stepped = false;
  double lr = 0;
};

class RecordDecisions : public Callback {
 public:
  explicit RecordDecisions(std::shared_ptr<MixedPrecision> precision) : precision_(std::move(precision)) {}
  void on_train_batch_end(Trainer& trainer, Module&, const torch::Tensor&, const Batch&, int64_t) override {
    const auto& scaler = *precision_->scaler();
    decisions.push_back({scaler.get_scale(), scaler.skipped_steps() == skipped_,
                         trainer.optimizers()[0]->param_groups()[0].options().get_lr()});
    skipped_ = scaler.skipped_steps();
  }
  std::vector<Decision> decisions;

 private:
  std::shared_ptr<MixedPrecision> precision_;
  int64_t skipped_ = 0;
};

TEST(CudaGradScalerParity, TheSameDecisionsAsPyTorchsGradScalerOnARealOverflow) {
  VOLT_REQUIRE_CUDA();
  TemporaryDirectory dir;
  torch::manual_seed(5);
  auto model = std::make_shared<Line>();
  auto inputs = torch::randn({kBatches, kBatchSize, 8});
  const auto targets = torch::randn({kBatches, kBatchSize, 1});
  for (const int64_t overflowing : {2, 9}) inputs[overflowing].mul_(1e4);

  StateDict input;
  input.set("weight", model->linear->weight.detach().clone());
  input.set("bias", model->linear->bias.detach().clone());
  input.set("inputs", inputs);
  input.set("targets", targets);
  input.set("growth_interval", torch::tensor(kGrowthInterval));
  const auto bytes = torch::pickle_save(input.to_ivalue());
  std::ofstream(dir.file("input.pt"), std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  const auto reference = run_command(reference_python() + " " + VOLT_SOURCE_DIR +
                                         "/tests/cuda/python/grad_scaler_reference.py " + dir.file("input.pt"),
                                     300);
  ASSERT_EQ(reference.exit_code, 0) << reference.output;

  auto options = quiet_options(dir.path());
  options.accelerator = "cuda";
  options.precision = "16-mixed";
  options.max_epochs = 1;
  auto precision = std::make_shared<MixedPrecision>(
      torch::kHalf, torch::kCUDA, std::make_shared<GradScaler>(GradScalerOptions{.growth_interval = kGrowthInterval}));
  Trainer trainer(options, nullptr, precision);
  auto recorder = std::make_shared<RecordDecisions>(precision);
  trainer.add_callback(recorder);
  auto data = std::make_shared<TensorDataset>(inputs.reshape({-1, 8}), targets.reshape({-1, 1}));
  trainer.fit(model, std::make_shared<DataLoader>(data, DataLoaderOptions{.batch_size = kBatchSize}));

  static const std::regex step_line("STEP (\\d+) scale=(\\S+) stepped=(\\d) lr=(\\S+)");
  std::vector<Decision> theirs;
  for (std::sregex_iterator it(reference.output.begin(), reference.output.end(), step_line), end; it != end; ++it) {
    theirs.push_back({std::stod((*it)[2]), (*it)[3] == "1", std::stod((*it)[4])});
  }
  ASSERT_EQ(theirs.size(), static_cast<size_t>(kBatches)) << reference.output;
  ASSERT_EQ(recorder->decisions.size(), theirs.size());
  bool grew = false;
  for (size_t i = 0; i < theirs.size(); ++i) {
    const auto& mine = recorder->decisions[i];
    EXPECT_EQ(mine.stepped, theirs[i].stepped) << "step " << i << ": volt " << (mine.stepped ? "stepped" : "skipped");
    EXPECT_EQ(mine.scale, theirs[i].scale) << "step " << i << ": the scale after update()";
    EXPECT_NEAR(mine.lr, theirs[i].lr, 1e-12 * theirs[i].lr) << "step " << i << ": the scheduler";
    grew = grew || (i > 0 && theirs[i].scale > theirs[i - 1].scale);
  }
  // The comparison covers what it is about: the designed overflows are skipped (at 65536 the
  // first clean steps overflow too, as PyTorch's default start does), and the scale grows again.
  EXPECT_FALSE(theirs[2].stepped || theirs[9].stepped) << "the scaled batches must overflow:\n" << reference.output;
  EXPECT_TRUE(grew) << "no growth after growth_interval clean steps:\n" << reference.output;

  static const std::regex weights_line("WEIGHTS (\\S+)");
  std::smatch match;
  ASSERT_TRUE(std::regex_search(reference.output, match, weights_line)) << reference.output;
  const auto want = comma_separated(match[1]);
  const auto got = torch::cat({model->linear->weight.detach().reshape(-1), model->linear->bias.detach()}).cpu().to(torch::kDouble);
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got[static_cast<int64_t>(i)].item<double>(), want[i], 1e-6 * std::max(1.0, std::abs(want[i])))
        << "parameter " << i << " after the last step";
  }
}

}  // namespace
}  // namespace volt::testing

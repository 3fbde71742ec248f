// Resuming bit for bit: a fit interrupted right after a checkpoint and resumed from it must end
// with weights torch::equal to a fit that never stopped, having seen the same batches in the same
// order and run the same validations, wherever in the loop the checkpoint was written.
#include <optional>

#include "tests/checkpoint/checkpoint_test_support.h"
#include "checkpoint/checkpoint_io.h"
#include "precision/mixed_precision.h"

namespace volt::testing {
namespace {

struct Scenario {
  std::string name;
  std::string precision = "32-true";
  RegressionOptions model;
  bool epoch_scheduler = false;
  int64_t accumulate = 1;
  bool shuffle = false;
  int64_t val_samples = 0;
  int64_t val_check_interval = 0;  // batches; 0: once per epoch
  SavePoint point = SavePoint::TrainBatchEnd;
  int64_t epoch = 0, batch = 0;    // where the checkpoint is written
  std::optional<GradScalerOptions> scaler;  // set: bf16-mixed with this GradScaler
  std::string accumulation_schedule;        // set: a GradientAccumulationScheduler from the command line
  int64_t limit_train_batches = 0;          // > 0: that many training batches per epoch
};

struct Outcome {
  torch::Tensor weights;
  std::vector<double> batch_sums;
  int64_t validation_steps = 0;
  int64_t global_step = 0;
  int64_t epoch = 0;
  std::vector<double> lrs;
  std::map<std::string, double> callback_metrics;
  double scale = 0;  // the GradScaler's, when the scenario has one
  int64_t growth_tracker = 0, skipped_steps = 0;
};

// 96 samples in batches of 8 (12 per epoch), 3 epochs. The module's initial weights come from
// `init_seed`; everything else random (dropout, shuffling) from the trainer's seed.
Outcome fit(const Scenario& s, const std::string& root, uint64_t init_seed, std::shared_ptr<Callback> callback,
            const std::string& ckpt_path) {
  auto options = quiet_options(root);
  options.max_epochs = 3;
  options.accumulate_grad_batches = s.accumulate;
  options.seed = 11;
  options.precision = s.precision;
  if (!s.accumulation_schedule.empty()) {
    options.callbacks = options_from_args({"--callback", "gradient_accumulation_scheduler:scheduling=" +
                                                             s.accumulation_schedule}).callbacks;
  }
  if (s.val_check_interval > 0) options.val_check_interval = BatchLimit::count(s.val_check_interval);
  if (s.limit_train_batches > 0) options.limit_train_batches = BatchLimit::count(s.limit_train_batches);
  torch::manual_seed(init_seed);
  auto model = std::make_shared<RecordingRegression>(s.model);
  model->epoch_scheduler = s.epoch_scheduler;
  std::shared_ptr<MixedPrecision> precision;
  if (s.scaler) {
    options.precision = "bf16-mixed";
    precision = std::make_shared<MixedPrecision>(torch::kBFloat16, torch::kCPU, std::make_shared<GradScaler>(*s.scaler));
  }
  auto trainer = precision ? std::make_unique<Trainer>(options, nullptr, precision) : std::make_unique<Trainer>(options);
  if (callback) trainer->add_callback(callback);
  try {
    trainer->fit(model, std::make_shared<RegressionData>(96, 8, s.shuffle, 3, s.val_samples), ckpt_path);
  } catch (const Interrupted&) {
  }
  Outcome out{model->flat_parameters(), model->batch_sums, model->validation_steps, trainer->global_step(),
              trainer->current_epoch()};
  out.callback_metrics = trainer->callback_metrics();
  if (precision) {
    out.scale = precision->scaler()->get_scale();
    out.growth_tracker = precision->scaler()->growth_tracker();
    out.skipped_steps = precision->scaler()->skipped_steps();
  }
  for (const auto& optimizer : trainer->optimizers()) {
    for (const auto& group : optimizer->param_groups()) out.lrs.push_back(group.options().get_lr());
  }
  return out;
}

class Resume : public ::testing::TestWithParam<Scenario> {};

TEST_P(Resume, EndsBitwiseEqualToTheUninterruptedRun) {
  const Scenario& s = GetParam();
  TemporaryDirectory dir;
  const auto path = dir.file("interrupted.ckpt");
  const Outcome reference = fit(s, dir.path(), 1, nullptr, "");
  auto saver = std::make_shared<SaveAndInterrupt>(path, s.point, s.epoch, s.batch);
  const Outcome first = fit(s, dir.path(), 1, saver, "");
  ASSERT_TRUE(saver->fired) << "the scenario's save point was never reached";
  // Different initial weights: everything that matters must come from the checkpoint.
  const Outcome resumed = fit(s, dir.path(), 2, nullptr, path);

  EXPECT_TRUE(torch::equal(resumed.weights, reference.weights))
      << "max difference " << (resumed.weights - reference.weights).abs().max().item<double>();
  ASSERT_EQ(first.batch_sums.size() + resumed.batch_sums.size(), reference.batch_sums.size())
      << "the resumed run repeated or skipped training batches";
  const std::vector<double> rest(reference.batch_sums.begin() + static_cast<long>(first.batch_sums.size()),
                                 reference.batch_sums.end());
  EXPECT_EQ(resumed.batch_sums, rest) << "the resumed run saw other batches, or in another order";
  EXPECT_EQ(first.validation_steps + resumed.validation_steps, reference.validation_steps)
      << "the resumed run repeated or skipped a validation";
  EXPECT_EQ(resumed.global_step, reference.global_step);
  EXPECT_EQ(resumed.epoch, reference.epoch);
  EXPECT_EQ(resumed.lrs, reference.lrs);
  EXPECT_EQ(resumed.callback_metrics, reference.callback_metrics) << "logged values differ after the resume";
}

INSTANTIATE_TEST_SUITE_P(
    InterruptionPoints, Resume,
    ::testing::Values(
        Scenario{.name = "MidEpochSGD", .point = SavePoint::TrainBatchEnd, .epoch = 1, .batch = 4},
        // Window [3, 5]: two micro-batches accumulated, with dropout and shuffling drawing random numbers.
        Scenario{.name = "InsideAnAccumulationWindow", .model = {.adam = true, .dropout = 0.3}, .accumulate = 3,
                 .shuffle = true, .point = SavePoint::TrainBatchEnd, .epoch = 1, .batch = 4},
        Scenario{.name = "StepIntervalScheduler", .model = {.adam = true, .step_scheduler = true}, .accumulate = 2,
                 .point = SavePoint::TrainBatchEnd, .epoch = 0, .batch = 5},
        Scenario{.name = "EpochEndWithEpochScheduler", .epoch_scheduler = true, .shuffle = true,
                 .point = SavePoint::TrainEpochEnd, .epoch = 1},
        Scenario{.name = "AfterAMidEpochValidation", .val_samples = 16, .val_check_interval = 5,
                 .point = SavePoint::ValidationEnd, .epoch = 1, .batch = 4},
        Scenario{.name = "BeforeADueValidation", .model = {.dropout = 0.2}, .val_samples = 16,
                 .val_check_interval = 5, .point = SavePoint::TrainBatchEnd, .epoch = 1, .batch = 9},
        // Scheduled accumulation (issue 21.1: resuming used to fail "can change only at the start
        // of an epoch"): after a closed window of 2 in epoch 0, and inside a window of 3 in epoch 1.
        Scenario{.name = "ScheduledAccumulationAfterAWindow", .model = {.adam = true},
                 .point = SavePoint::TrainBatchEnd, .epoch = 0, .batch = 5, .accumulation_schedule = "0:2;1:3"},
        Scenario{.name = "ScheduledAccumulationInsideAWindow", .model = {.adam = true, .dropout = 0.2},
                 .shuffle = true, .point = SavePoint::TrainBatchEnd, .epoch = 1, .batch = 4,
                 .accumulation_schedule = "0:2;1:3"},
        Scenario{.name = "LastBatchOfTheFit", .model = {.adam = true}, .epoch_scheduler = true,
                 .point = SavePoint::TrainBatchEnd, .epoch = 2, .batch = 11}),
    [](const ::testing::TestParamInfo<Scenario>& info) { return info.param.name; });

// A mid-epoch resume whose run differs from the one that wrote the checkpoint says what changed
// and what the rest of the epoch sees, once; the same run resumes silently.
TEST(ResumeMidEpoch, WarnsWhenTheAccumulationDataOrLimitsChanged) {
  TemporaryDirectory dir;
  const Scenario saved{.accumulate = 2, .point = SavePoint::TrainBatchEnd, .epoch = 1, .batch = 5};
  const auto path = dir.file("mid_epoch.ckpt");
  auto saver = std::make_shared<SaveAndInterrupt>(path, saved.point, saved.epoch, saved.batch);
  fit(saved, dir.path(), 1, saver, "");
  ASSERT_TRUE(saver->fired);
  Scenario limited = saved;
  limited.limit_train_batches = 10;
  const auto limited_path = dir.file("limited.ckpt");
  auto limited_saver = std::make_shared<SaveAndInterrupt>(limited_path, saved.point, saved.epoch, saved.batch);
  fit(limited, dir.path(), 1, limited_saver, "");
  ASSERT_TRUE(limited_saver->fired);

  const auto warnings_of = [&](const Scenario& resumed, const std::string& checkpoint) {
    ::testing::internal::CaptureStderr();
    fit(resumed, dir.path(), 2, nullptr, checkpoint);
    return ::testing::internal::GetCapturedStderr();
  };
  const std::string accumulation = "by a run with accumulate_grad_batches 2, this one has 3: the rest of epoch 1 "
                                   "keeps the 2 micro-batches per step in use when it was written";
  const std::string other_batches = "the rest of this epoch will not see exactly the batches the original run would have";

  EXPECT_EQ(warnings_of(saved, path), "") << "the same run resumes without a warning";
  EXPECT_EQ(warnings_of(limited, limited_path), "") << "the same limits resume at the batch index, without a warning";

  Scenario more_accumulation = saved;
  more_accumulation.accumulate = 3;
  auto text = warnings_of(more_accumulation, path);
  EXPECT_NE(text.find(accumulation), std::string::npos) << text;
  EXPECT_EQ(text.find(other_batches), std::string::npos) << "the data order is the same:\n" << text;

  Scenario shuffled = saved;
  shuffled.shuffle = true;
  text = warnings_of(shuffled, path);
  EXPECT_NE(text.find("whose data or accumulation differs from this one (shuffle"), std::string::npos) << text;
  EXPECT_NE(text.find(other_batches), std::string::npos) << text;

  Scenario fewer = limited;
  fewer.limit_train_batches = 8;
  text = warnings_of(fewer, limited_path);
  EXPECT_NE(text.find("training batches per epoch: 10 -> 8"), std::string::npos) << text;
  EXPECT_NE(text.find(other_batches), std::string::npos) << text;
  EXPECT_EQ(text.find(other_batches, text.find(other_batches) + 1), std::string::npos) << "once:\n" << text;
}

// bf16-mixed (autocast on the CPU) resumes bit for bit too: the precision's state is part of the
// checkpoint.
TEST(ResumePrecision, Bf16MixedInsideAnAccumulationWindow) {
  const auto& names = precision_names();
  ASSERT_NE(std::find(names.begin(), names.end(), "bf16-mixed"), names.end()) << "bf16-mixed is not registered";
  const Scenario s{.name = "Bf16Mixed", .precision = "bf16-mixed", .model = {.adam = true, .dropout = 0.2},
                   .accumulate = 3, .shuffle = true, .point = SavePoint::TrainBatchEnd, .epoch = 1, .batch = 7};
  TemporaryDirectory dir;
  const Outcome reference = fit(s, dir.path(), 1, nullptr, "");
  auto saver = std::make_shared<SaveAndInterrupt>(dir.file("bf16.ckpt"), s.point, s.epoch, s.batch);
  fit(s, dir.path(), 1, saver, "");
  ASSERT_TRUE(saver->fired);
  const Outcome resumed = fit(s, dir.path(), 2, nullptr, dir.file("bf16.ckpt"));
  EXPECT_TRUE(torch::equal(resumed.weights, reference.weights))
      << "max difference " << (resumed.weights - reference.weights).abs().max().item<double>();
  EXPECT_EQ(resumed.callback_metrics, reference.callback_metrics);
}

TEST(ResumeLast, FindsTheNewestLastCheckpointAndResumesFromIt) {
  TemporaryDirectory dir;
  const Scenario s{.model = {.adam = true}};
  const Outcome reference = fit(s, dir.path(), 1, nullptr, "");
  // An older checkpoint elsewhere under the root must lose against the newer last.ckpt.
  fit(s, dir.path(), 1, std::make_shared<SaveAndInterrupt>(dir.file("volt_logs/version_0/checkpoints/last.ckpt"),
                                                           SavePoint::TrainBatchEnd, 0, 3), "");
  const auto newest = std::filesystem::path(dir.path()) / "checkpoints" / "last.ckpt";
  fit(s, dir.path(), 1, std::make_shared<SaveAndInterrupt>(newest, SavePoint::TrainBatchEnd, 1, 6), "");
  const Outcome resumed = fit(s, dir.path(), 2, nullptr, "last");
  EXPECT_TRUE(torch::equal(resumed.weights, reference.weights));
  EXPECT_EQ(resumed.batch_sums.size(), 36u - 19u) << "resumed from another checkpoint than the newest last.ckpt";
}

TEST(ResumeLast, WithoutAnyCheckpointFitStartsFromScratch) {
  TemporaryDirectory dir;
  const Scenario s;
  const Outcome fresh = fit(s, dir.path(), 1, nullptr, "");
  const Outcome last = fit(s, dir.path(), 1, nullptr, "last");
  EXPECT_TRUE(torch::equal(fresh.weights, last.weights));
  EXPECT_EQ(last.batch_sums.size(), 36u);
}

TEST(ResumeLast, TheCkptPathOptionIsWhatFitResumesFrom) {
  const char* argv[] = {"program", "--ckpt-path", "last"};
  EXPECT_EQ(TrainerOptions::from_args(3, argv).ckpt_path, "last");

  TemporaryDirectory dir;
  const Scenario s{.model = {.adam = true}};
  const Outcome reference = fit(s, dir.path(), 1, nullptr, "");
  fit(s, dir.path(), 1, std::make_shared<SaveAndInterrupt>(dir.file("checkpoints/last.ckpt"), SavePoint::TrainBatchEnd, 1, 2), "");
  auto options = quiet_options(dir.path());
  options.max_epochs = 3;
  options.seed = 11;
  options.ckpt_path = "last";
  torch::manual_seed(5);
  auto model = std::make_shared<RecordingRegression>(s.model);
  Trainer trainer(options);
  trainer.fit(model, std::make_shared<RegressionData>(96, 8, false, 3));
  EXPECT_TRUE(torch::equal(model->flat_parameters(), reference.weights));
  EXPECT_EQ(model->batch_sums.size(), 36u - 15u);
}

// The GradScaler's state travels in the checkpoint: every 5th batch's loss is multiplied by 1e36,
// so its scaled gradients overflow and the step is skipped (the scale backs off); in between the
// scale grows every 3 finite steps. Scaling by powers of two is exact, so the weights alone would
// not notice a scaler that restarted from its initial state: the test compares the scale, the
// growth tracker and the skipped-step count with the uninterrupted run's.
TEST(ResumePrecision, Bf16MixedWithAGradScalerContinuesItsScale) {
  const Scenario s{.name = "Bf16MixedGradScaler",
                   .model = {.adam = true, .loss_weight = [](int64_t i) { return i % 5 == 2 ? 1e36 : 1.0; }},
                   .shuffle = true, .point = SavePoint::TrainBatchEnd, .epoch = 1, .batch = 6,
                   .scaler = GradScalerOptions{.growth_interval = 3}};
  TemporaryDirectory dir;
  const Outcome reference = fit(s, dir.path(), 1, nullptr, "");
  ASSERT_GT(reference.skipped_steps, 3) << "the overflowing batches did not make the scaler skip steps";
  ASSERT_TRUE(std::isfinite(reference.scale));
  auto saver = std::make_shared<SaveAndInterrupt>(dir.file("scaler.ckpt"), s.point, s.epoch, s.batch);
  const Outcome first = fit(s, dir.path(), 1, saver, "");
  ASSERT_TRUE(saver->fired);
  ASSERT_NE(first.scale, GradScalerOptions{}.init_scale) << "the scale never moved before the checkpoint";
  const Outcome resumed = fit(s, dir.path(), 2, nullptr, dir.file("scaler.ckpt"));
  EXPECT_TRUE(torch::equal(resumed.weights, reference.weights))
      << "max difference " << (resumed.weights - reference.weights).abs().max().item<double>();
  EXPECT_EQ(resumed.scale, reference.scale);
  EXPECT_EQ(resumed.growth_tracker, reference.growth_tracker);
  EXPECT_EQ(resumed.skipped_steps, reference.skipped_steps);

  // The control: the same checkpoint with its scaler state marked as another precision's (so it
  // is not restored) ends with another scale, growth tracker or count, which the checks above see.
  CheckpointIO io;
  StateDict checkpoint = io.load(dir.file("scaler.ckpt"));
  StateDict precision = checkpoint.child("precision");
  precision.set("name", std::string("32-true"));
  checkpoint.set("precision", precision);
  io.save(checkpoint, dir.file("no_scaler.ckpt"));
  const Outcome fresh_scaler = fit(s, dir.path(), 2, nullptr, dir.file("no_scaler.ckpt"));
  EXPECT_TRUE(fresh_scaler.scale != reference.scale || fresh_scaler.growth_tracker != reference.growth_tracker ||
              fresh_scaler.skipped_steps != reference.skipped_steps)
      << "this test cannot tell a restored scaler from a fresh one";
}

}  // namespace
}  // namespace volt::testing

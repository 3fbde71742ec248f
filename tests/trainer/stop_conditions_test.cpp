// Issue 21.6: --min-epochs and --max-time through the command line and the Trainer, with
// Lightning's rules (Note [Stopping before min_epochs]): should_stop and --max-time end the fit
// only once --min-epochs epochs are done; --max-steps ends it regardless. Each case has its
// control (the same run without --min-epochs stops at once). Wall time appears only as a lower
// bound on sleeping steps, so a loaded machine cannot make these fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>

#include "tests/support/test_doubles.h"
#include "tests/support/test_support.h"

namespace volt::testing {
namespace {

// Asks to stop after the first training batch of the fit.
class StopAtOnce : public Callback {
 public:
  void on_train_batch_end(Trainer& trainer, Module&, const torch::Tensor&, const Batch&, int64_t) override {
    trainer.set_should_stop(true);
  }
};

struct Stopped {
  int64_t global_step = 0;
  int64_t epochs = 0;  // finished epochs
};

// 10 training batches an epoch, options from the command line `flags` (quiet; --max-epochs 10
// unless `flags` say otherwise).
Stopped fit_from_command_line(std::vector<std::string> flags, std::shared_ptr<Callback> callback = nullptr,
                              std::shared_ptr<Module> module = std::make_shared<RegressionModule>()) {
  TemporaryDirectory dir;
  if (std::find(flags.begin(), flags.end(), "--max-epochs") == flags.end()) flags.insert(flags.end(), {"--max-epochs", "10"});
  for (const char* quiet : {"--enable-progress-bar=false", "--enable-model-summary=false", "--enable-checkpointing=false",
                            "--num-sanity-val-steps=0", "--logger=none"}) {
    flags.push_back(quiet);
  }
  flags.push_back("--default-root-dir=" + dir.path());
  Trainer trainer(options_from_args(flags));
  if (callback) trainer.add_callback(callback);
  trainer.fit(module, std::make_shared<RegressionData>(80, 8, false, 0, 16));
  return {trainer.global_step(), trainer.current_epoch()};
}

TEST(MinEpochs, ShouldStopWaitsUntilMinEpochsAreDone) {
  const auto control = fit_from_command_line({}, std::make_shared<StopAtOnce>());
  EXPECT_EQ(control.global_step, 1) << "should_stop ends the fit at the next step boundary";
  const auto held = fit_from_command_line({"--min-epochs", "3"}, std::make_shared<StopAtOnce>());
  EXPECT_EQ(held.epochs, 3);
  EXPECT_EQ(held.global_step, 30) << "three whole epochs, then the stop is honoured before the fourth";
}

TEST(MinEpochs, MaxTimeWaitsUntilMinEpochsAreDone) {
  // A zero budget is spent at the first check, before the first batch, whatever the machine's speed.
  const auto control = fit_from_command_line({"--max-time", "00:00:00:00"});
  EXPECT_EQ(control.global_step, 0);
  EXPECT_EQ(control.epochs, 0);
  const auto held = fit_from_command_line({"--max-time", "00:00:00:00", "--min-epochs", "2"});
  EXPECT_EQ(held.epochs, 2);
  EXPECT_EQ(held.global_step, 20);
}

TEST(MinEpochs, MaxStepsEndsTheFitRegardless) {
  const auto run = fit_from_command_line({"--max-steps", "5", "--min-epochs", "2"});
  EXPECT_EQ(run.global_step, 5);
  EXPECT_EQ(run.epochs, 0);
}

TEST(MaxTime, StopsAtTheFirstStepBoundaryOnceTheBudgetIsSpent) {
  const auto started = std::chrono::steady_clock::now();
  const auto run = fit_from_command_line({"--max-time", "00:00:00:01", "--max-epochs", "1000"}, nullptr,
                                         std::make_shared<SlowModule>(std::chrono::milliseconds(50)));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  EXPECT_GE(seconds, 1.0) << "stopped before the budget was spent";
  // Every step sleeps 50 ms, so at most 20 steps end within the second; the step that spends it
  // is the last. (A slower machine takes fewer steps; none takes more.)
  EXPECT_GE(run.global_step, 1);
  EXPECT_LE(run.global_step, 21);
}

}  // namespace
}  // namespace volt::testing

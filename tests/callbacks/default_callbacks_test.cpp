// The callbacks the Trainer adds by default (Lightning's: model summary, progress bar,
// checkpointing) and where: a default is added only when no callback of the user's has its role
// (Callback::role()), whatever its class; checkpoint callbacks run last.
#include <gtest/gtest.h>

#include "callbacks/model_checkpoint.h"
#include "callbacks/model_summary.h"
#include "callbacks/progress_bar.h"
#include "tests/support/regression_problem.h"
#include "tests/support/test_support.h"

namespace volt::testing {
namespace {

// A user's own progress display: not a ProgressBar, but it stands in for one.
class OwnProgress : public Callback {
 public:
  CallbackRole role() const override { return CallbackRole::ProgressBar; }
};

class Plain : public Callback {};

int64_t count_role(const Trainer& trainer, CallbackRole role) {
  int64_t n = 0;
  for (const auto& c : trainer.callbacks()) n += c->role() == role;
  return n;
}

TEST(DefaultCallbacks, AreAddedOnlyWhereNoCallbackHasTheirRoleAndCheckpointsRunLast) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.enable_progress_bar = true;
  options.enable_model_summary = true;
  options.enable_checkpointing = true;
  options.max_epochs = 1;
  options.num_sanity_val_steps = 0;
  Trainer trainer(options);
  auto own = std::make_shared<OwnProgress>();
  auto plain = std::make_shared<Plain>();
  trainer.add_callback(own);
  trainer.add_callback(plain);
  trainer.fit(std::make_shared<RegressionModule>(), std::make_shared<RegressionData>(16, 8));
  EXPECT_EQ(count_role(trainer, CallbackRole::ProgressBar), 1) << "the user's display stands in for ProgressBar";
  for (const auto& c : trainer.callbacks()) EXPECT_EQ(dynamic_cast<ProgressBar*>(c.get()), nullptr);
  EXPECT_EQ(count_role(trainer, CallbackRole::ModelSummary), 1);
  EXPECT_EQ(count_role(trainer, CallbackRole::Checkpoint), 1);
  EXPECT_EQ(trainer.callbacks().back()->role(), CallbackRole::Checkpoint) << "checkpoints run last";
  EXPECT_EQ(ProgressBar().role(), CallbackRole::ProgressBar);
  EXPECT_EQ(ModelSummary().role(), CallbackRole::ModelSummary);
  EXPECT_EQ(plain->role(), CallbackRole::Other);
}

}  // namespace
}  // namespace volt::testing

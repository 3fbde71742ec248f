// The Trainer's process group runs its rings and its collectives through shared memory on a
// thread of its own when every process of the node has two cores or more (Note [Ring collectives
// off the calling thread]); VOLT_RING_THREAD=0|1 decides it on any machine. Trained through the
// Trainer with and without the thread, every strategy family that reduces through the rings or
// the shared-memory group trains bit for bit alike, every rank after every step.
#include <gtest/gtest.h>

#include <string>

#include "tests/distributed/worker_runs.h"
#include "tests/support/test_support.h"

namespace volt::ring_thread_tests {
namespace {

using testing::run_command;

class TrainedWithARingThread : public ::testing::TestWithParam<std::string> {};

TEST_P(TrainedWithARingThread, TrainsBitwiseLikeWithout) {
  const std::string& strategy = GetParam();
  testing::TemporaryDirectory dir;
  const auto run = [&](int ring_thread) {
    const auto result = run_command(
        "VOLT_RING_THREAD=" + std::to_string(ring_thread) + " " +
            testing::adam_train_command(dir.path() + "/ring" + std::to_string(ring_thread),
                                        "--batch-size 2 --model mlp --devices 2 --max-epochs 1 --print-steps "
                                        "--strategy \"" + strategy + "\""),
        240);
    EXPECT_EQ(result.exit_code, 0) << result.output;
    for (int rank = 0; rank < 2; ++rank) {
      const std::string line = "TRANSPORT rank=" + std::to_string(rank) + " all_reduce=shared_memory ring_thread=" +
                               std::to_string(ring_thread);
      EXPECT_NE(result.output.find(line), std::string::npos) << "no '" << line << "' in\n" << result.output;
    }
    return testing::step_lines(result.output);
  };
  const auto with = run(1), without = run(0);
  ASSERT_EQ(with.size(), 2u);
  ASSERT_FALSE(with.begin()->second.empty());
  testing::expect_steps_close(with, without, 0.0, strategy + ": with the ring thread vs without");
}

INSTANTIATE_TEST_SUITE_P(Strategies, TrainedWithARingThread,
                         ::testing::Values("ddp", "ddp_sharded", "fsdp:min_num_params=20"),
                         [](const auto& info) {
                           const auto& name = info.param;
                           return name == "ddp" ? std::string("Ddp") : name == "ddp_sharded" ? std::string("DdpSharded")
                                                                                            : std::string("Fsdp");
                         });

TEST(RingThreadVariable, AnyOtherValueIsAConfigurationError) {
  testing::TemporaryDirectory dir;
  const auto result = run_command("VOLT_RING_THREAD=yes " + testing::adam_train_command(
                                                                dir.path(), "--batch-size 2 --devices 2 --max-epochs 1") +
                                      " 2>&1",
                                  120);
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("VOLT_RING_THREAD: expected 0 (rings on the calling thread) or 1"), std::string::npos)
      << result.output;
}

}  // namespace
}  // namespace volt::ring_thread_tests

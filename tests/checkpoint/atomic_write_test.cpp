// Atomic writes: a process killed between writing a checkpoint and renaming it into place leaves
// the previous checkpoint loadable under the final name and no partial file there; the next
// write of that name removes the dead process's temporary file.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "tests/checkpoint/checkpoint_test_support.h"
#include "checkpoint/checkpoint_io.h"
#include "core/error.h"

namespace volt::testing {
namespace {

namespace fs = std::filesystem;

StateDict state_with(double value) {
  StateDict state;
  state.set("weights", torch::full({256}, value));
  return state;
}

// Saves `state` to `path` in a child process that is killed at the pause point before the
// rename; returns how the child ended.
int save_in_a_child_killed_before_rename(const StateDict& state, const fs::path& path) {
  const pid_t child = ::fork();
  if (child == 0) {
    ::setenv("VOLT_CHECKPOINT_TEST_KILL", "before_rename", 1);
    try {
      CheckpointIO().save(state, path);
    } catch (...) {
      ::_exit(3);
    }
    ::_exit(0);  // not reached when the pause point works
  }
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (::waitpid(child, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      ADD_FAILURE() << "the child did not finish within 60 s";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return status;
}


TEST(AtomicWrite, AKillBeforeTheRenameLeavesThePreviousCheckpoint) {
  TemporaryDirectory dir;
  const fs::path path = dir.file("last.ckpt");
  CheckpointIO io;
  io.save(state_with(1.0), path);

  const int status = save_in_a_child_killed_before_rename(state_with(2.0), path);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the child was not killed at the pause point";
  // The final name still holds the complete previous checkpoint; the new bytes sit in a hidden
  // temporary file.
  EXPECT_TRUE(torch::equal(io.load(path).get_tensor("weights"), torch::full({256}, 1.0)));
  const auto names = directory_entries(dir.path());
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[1], "last.ckpt");
  EXPECT_EQ(names[0].rfind(".last.ckpt.tmp-", 0), 0u) << names[0];

  // The next save replaces the checkpoint and cleans up after the dead writer.
  io.save(state_with(3.0), path);
  EXPECT_TRUE(torch::equal(io.load(path).get_tensor("weights"), torch::full({256}, 3.0)));
  EXPECT_EQ(directory_entries(dir.path()), std::vector<std::string>{"last.ckpt"});
}

TEST(AtomicWrite, AKilledFirstWriteLeavesNoFileUnderTheFinalName) {
  TemporaryDirectory dir;
  const fs::path path = dir.file("checkpoints/epoch=0.ckpt");
  const int status = save_in_a_child_killed_before_rename(state_with(1.0), path);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_THROW(CheckpointIO().load(path), CheckpointError);
}

}  // namespace
}  // namespace volt::testing

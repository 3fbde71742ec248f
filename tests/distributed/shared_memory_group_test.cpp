// Note [Collectives through shared memory]: all_reduce through a segment every rank of the group
// maps gives each rank the reduction in rank order (the same bits on every rank), for every dtype
// and op it accepts, at sizes that span many chunks; a stalled rank fails the others within the
// timeout naming it, a killed one within ~100 ms naming it and its pid; no segment is left in
// /dev/shm, also after kill -9, and a segment a dead creator left is removed by the next group.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "core/error.h"
#include "distributed/communicator.h"
#include "distributed/network.h"
#include "distributed/shared_memory_group.h"
#include "tests/distributed/thread_ranks.h"
#include "tests/distributed/worker_runs.h"
#include "tests/support/test_support.h"

namespace volt {
namespace {

using testing::loopback_options;
using testing::TemporaryDirectory;
using testing::with_communicators;

constexpr size_t kSmallSlot = 4096;  // chunks of 4 KiB: a few thousand elements span many

std::unique_ptr<SharedMemoryGroup> join(Communicator& c, size_t slot_bytes = kSmallSlot,
                                        std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  std::string why_not;
  auto group = SharedMemoryGroup::join([&](const std::string& bytes) { return c.all_gather_bytes(bytes); }, c.rank(),
                                       c.size(), timeout, "test group", slot_bytes, &why_not);
  EXPECT_NE(group, nullptr) << why_not;
  return group;
}

// The segments of this host's groups now in /dev/shm whose name holds `pid`.
int64_t segments_of(pid_t pid) {
  int64_t count = 0;
  const std::string prefix = "volt-shm-" + std::to_string(pid) + "-";
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    if (entry.path().filename().string().rfind(prefix, 0) == 0) ++count;
  }
  return count;
}

// Rank r's values: distinct per rank and element, exact in every dtype tested.
torch::Tensor values_of(int64_t rank, int64_t numel, c10::ScalarType dtype) {
  return (torch::arange(numel, torch::kDouble).remainder(97) * (rank + 1) - 40 * rank).to(dtype);
}

TEST(SharedMemoryGroup, AllReduceGivesEveryRankTheReductionInRankOrder) {
  for (const int64_t world : {2, 3}) {
    with_communicators(world, [&](Communicator& c) {
      auto group = join(c);
      ASSERT_NE(group, nullptr);
      for (const auto dtype : {torch::kFloat, torch::kDouble, torch::kInt, torch::kLong, torch::kHalf, torch::kBFloat16}) {
        for (const auto op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min}) {
          for (const int64_t numel : {int64_t{0}, int64_t{1}, int64_t{17}, int64_t{5000}}) {
            auto tensor = values_of(c.rank(), numel, dtype);
            // Expected: rank 0's values combined with rank 1's, then rank 2's (in float32 for
            // the 16-bit floats' sum, rounded once).
            const bool narrow = dtype == torch::kHalf || dtype == torch::kBFloat16;
            auto expected = values_of(0, numel, dtype).to(narrow && op == ReduceOp::Sum ? torch::kFloat : dtype);
            for (int64_t r = 1; r < world; ++r) {
              const auto other = values_of(r, numel, dtype);
              expected = op == ReduceOp::Sum   ? expected + other
                         : op == ReduceOp::Max ? torch::maximum(expected, other.to(expected.scalar_type()))
                                               : torch::minimum(expected, other.to(expected.scalar_type()));
            }
            group->all_reduce(tensor, op);
            ASSERT_TRUE(torch::equal(tensor, expected.to(dtype)))
                << "world " << world << ", rank " << c.rank() << ", " << dtype << ", op " << static_cast<int>(op)
                << ", numel " << numel;
          }
        }
      }
      group->barrier();
    });
  }
}

TEST(SharedMemoryGroup, EveryRankGetsTheSameBits) {
  with_communicators(3, [&](Communicator& c) {
    auto group = join(c, size_t{1} << 16);
    ASSERT_NE(group, nullptr);
    torch::manual_seed(c.rank());
    auto tensor = torch::randn({300001});
    group->all_reduce(tensor, ReduceOp::Sum);
    const auto all = c.all_gather(tensor);
    for (int64_t r = 1; r < c.size(); ++r) EXPECT_TRUE(torch::equal(all[r], all[0])) << "rank " << r;
  });
}

TEST(SharedMemoryGroup, NoSegmentIsLeftOnceEveryRankJoined) {
  with_communicators(2, [&](Communicator& c) {
    auto group = join(c);
    ASSERT_NE(group, nullptr);
    EXPECT_EQ(segments_of(::getpid()), 0) << "the name is removed as soon as every rank mapped the segment";
    auto tensor = torch::ones({10});
    group->all_reduce(tensor, ReduceOp::Sum);
    EXPECT_TRUE(torch::equal(tensor, torch::full({10}, 2.0)));
  });
}

TEST(SharedMemoryGroup, AStalledRankFailsTheOthersWithinTheTimeoutNamingIt) {
  std::atomic<bool> finished{false};
  with_communicators(2, [&](Communicator& c) {
    auto group = join(c, kSmallSlot, std::chrono::milliseconds(1500));
    ASSERT_NE(group, nullptr);
    if (c.rank() == 1) {  // alive, never calls
      while (!finished) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return;
    }
    auto tensor = torch::ones({10});
    const auto start = std::chrono::steady_clock::now();
    try {
      group->all_reduce(tensor, ReduceOp::Sum);
      ADD_FAILURE() << "expected a DistributedError";
    } catch (const DistributedError& e) {
      EXPECT_NE(std::string(e.what()).find("rank 1 did not arrive within 1500 ms"), std::string::npos) << e.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
    EXPECT_THROW(group->all_reduce(tensor, ReduceOp::Sum), DistributedError) << "a failed group takes no more";
    finished = true;
  });
}

// Ranks whose calls disagree (another size, a barrier against an all_reduce) fail, naming the rank
// and both calls, instead of mixing two collectives' values.
TEST(SharedMemoryGroup, RanksThatCallDifferentCollectivesFailNamingBoth) {
  with_communicators(2, [&](Communicator& c) {
    auto group = join(c);
    ASSERT_NE(group, nullptr);
    auto tensor = torch::ones({c.rank() == 0 ? 100 : 101});
    try {
      group->all_reduce(tensor, ReduceOp::Sum);
      ADD_FAILURE() << "expected a DistributedError on rank " << c.rank();
    } catch (const DistributedError& e) {
      const std::string other = c.rank() == 0 ? "rank 1 called an all_reduce of 101 Float elements"
                                              : "rank 0 called an all_reduce of 100 Float elements";
      EXPECT_NE(std::string(e.what()).find(other), std::string::npos) << e.what();
    }
  });
}

// With the option on, the Communicator's all_reduce goes through shared memory on one host
// (sub-groups too), Mean included, asynchronously on its ring thread; it is off by default.
TEST(CommunicatorThroughSharedMemory, ReducesInRankOrderAndTheOptionTurnsItOn) {
  with_communicators(3, [](CommunicatorOptions& options) { options.shared_memory = true; }, [&](Communicator& c) {
    ASSERT_TRUE(c.reduces_through_shared_memory());
    for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
      auto sum = values_of(c.rank(), 5000, dtype);
      auto mean = values_of(c.rank(), 5000, dtype);
      auto handle = c.all_reduce_async(sum);
      c.all_reduce(mean, ReduceOp::Mean);
      handle.wait();
      auto expected = (values_of(0, 5000, dtype).to(torch::kFloat) + values_of(1, 5000, dtype)) + values_of(2, 5000, dtype);
      EXPECT_TRUE(torch::equal(sum, expected.to(dtype))) << dtype;
      EXPECT_TRUE(torch::equal(mean, expected.to(dtype).div_(3))) << dtype;
    }
    EXPECT_EQ(c.counters()[CollectiveKind::AllReduce].calls, 4) << "counted like any all_reduce";
    auto pair = c.new_group({0, 2});
    if (pair) {
      EXPECT_TRUE(pair->reduces_through_shared_memory());
      auto t = torch::full({7}, static_cast<double>(c.rank()));
      pair->all_reduce(t, ReduceOp::Max);
      EXPECT_TRUE(torch::equal(t, torch::full({7}, 2.0)));
    }
  });
  with_communicators(2, [](Communicator& c) { EXPECT_FALSE(c.reduces_through_shared_memory()) << "off by default"; });
}

// The Trainer with VOLT_SHM=1: ddp on 2 processes trains, every rank after every step, bit for
// bit like over Gloo (a sum of two is the same in either order).
TEST(CommunicatorThroughSharedMemory, DdpTrainsAsOverGlooWithVoltShm) {
  TemporaryDirectory shm_dir, gloo_dir;
  const std::string args = "--batch-size 2 --model mlp --strategy ddp --devices 2 --max-epochs 1 --print-steps";
  const auto through_shm = testing::run_command("VOLT_SHM=1 " + testing::adam_train_command(shm_dir.path(), args), 240);
  ASSERT_EQ(through_shm.exit_code, 0) << through_shm.output;
  const auto over_gloo = testing::run_command(testing::adam_train_command(gloo_dir.path(), args), 240);
  ASSERT_EQ(over_gloo.exit_code, 0) << over_gloo.output;
  const auto got = testing::step_lines(through_shm.output);
  ASSERT_EQ(got.size(), 2u) << through_shm.output;
  ASSERT_FALSE(got.begin()->second.empty()) << through_shm.output;
  testing::expect_steps_close(got, testing::step_lines(over_gloo.output), 0.0, "VOLT_SHM=1 vs Gloo");
  // And each run went the way it says: the comparison means nothing if both took the same path.
  for (const auto& [run, expected] : {std::pair{&through_shm, "shared_memory"}, std::pair{&over_gloo, "process_group"}}) {
    for (int rank = 0; rank < 2; ++rank) {
      const std::string line = "TRANSPORT rank=" + std::to_string(rank) + " all_reduce=" + expected;
      EXPECT_NE(run->output.find(line), std::string::npos) << "no '" << line << "' in\n" << run->output;
    }
  }
}

// Processes (a suite of its own, so that its process forks before any other test ran): rank 1 is killed with SIGKILL between two all_reduces; rank 0's second one fails
// naming it within a second, and no segment of rank 0 is left in /dev/shm.
TEST(SharedMemoryGroupKill, AKilledRankFailsTheOthersQuicklyAndLeavesNoSegment) {
  const int64_t port = find_free_port();
  int report[2];
  ASSERT_EQ(::pipe(report), 0);
  std::vector<pid_t> children;
  for (int64_t rank = 0; rank < 2; ++rank) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid != 0) {
      children.push_back(pid);
      continue;
    }
    // The child: small tensors only (no intra-op threads after fork); exits with its verdict.
    ::close(report[0]);
    torch::set_num_threads(1);
    int code = 1;
    try {
      auto c = Communicator::connect(loopback_options(rank, 2, port, std::chrono::seconds(30)));
      auto group = SharedMemoryGroup::join([&](const std::string& b) { return c->all_gather_bytes(b); }, rank, 2,
                                           std::chrono::seconds(30), "test group", kSmallSlot);
      auto tensor = torch::ones({1000});
      group->all_reduce(tensor, ReduceOp::Sum);
      if (rank == 1) ::raise(SIGKILL);
      const auto start = std::chrono::steady_clock::now();
      try {
        group->all_reduce(tensor, ReduceOp::Sum);
      } catch (const DistributedError& e) {
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        const std::string message = std::string(e.what()) + " after " + std::to_string(seconds) + " s\n";
        (void)!::write(report[1], message.data(), message.size());
        code = std::string(e.what()).find("rank 1 (pid ") != std::string::npos && seconds < 5 ? 0 : 2;
      }
    } catch (...) {
      code = 3;
    }
    ::_exit(code);
  }
  ::close(report[1]);
  int status0 = 0, status1 = 0;
  ::waitpid(children[0], &status0, 0);
  ::waitpid(children[1], &status1, 0);
  std::string message(4096, '\0');
  const auto got = ::read(report[0], message.data(), message.size());
  ::close(report[0]);
  message.resize(got > 0 ? static_cast<size_t>(got) : 0);
  EXPECT_TRUE(WIFSIGNALED(status1) && WTERMSIG(status1) == SIGKILL);
  ASSERT_TRUE(WIFEXITED(status0)) << message;
  EXPECT_EQ(WEXITSTATUS(status0), 0) << "rank 0's error: " << message;
  EXPECT_NE(message.find("is gone"), std::string::npos) << message;
  EXPECT_EQ(segments_of(children[0]), 0);
}

// A segment whose creator died before every rank mapped it (killed in between) is removed by the
// next group a rank 0 of this host creates.
TEST(SharedMemoryGroupKill, TheNextGroupRemovesASegmentADeadCreatorLeft) {
  const pid_t dead = ::fork();
  ASSERT_GE(dead, 0);
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  const std::string name = "/volt-shm-" + std::to_string(dead) + "-abc";
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ::close(fd);
  ASSERT_EQ(segments_of(dead), 1);
  with_communicators(2, [&](Communicator& c) { ASSERT_NE(join(c), nullptr); });
  EXPECT_EQ(segments_of(dead), 0);
}

}  // namespace
}  // namespace volt

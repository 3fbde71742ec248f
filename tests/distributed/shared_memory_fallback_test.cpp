// Where /dev/shm cannot hold what shared memory needs, collectives fall back, every rank alike, and
// rank 0 says so: a segment for the slots that does not fit leaves the group on Gloo (one host,
// and a host of two in the hierarchical all-reduce), and buffers that do not fit are refused on
// every rank, with the reason, leaving nothing behind. A small /dev/shm is a tmpfs of 1 MiB
// mounted over it in a mount namespace of its own (unshare -m, as root); the tests that need one
// skip themselves where that cannot be had.
#include <gtest/gtest.h>

#include <string>

#include "distributed/network.h"
#include "distributed/transports/shared_memory_group.h"
#include "tests/distributed/shared_memory_support.h"
#include "tests/distributed/thread_ranks.h"
#include "tests/distributed/worker_runs.h"
#include "tests/support/test_support.h"

namespace volt::testing {
namespace {

// `command` run with /dev/shm a tmpfs of `size` (mount's size=); empty when no mount namespace
// can be had here.
std::string with_small_dev_shm(const std::string& command, const std::string& size = "1M") {
  const std::string mount = "mount -t tmpfs -o size=" + size + " tmpfs /dev/shm";
  const auto probe = run_command("unshare -m sh -c '" + mount + "' 2>&1", 30);
  if (probe.exit_code != 0) return "";
  return "unshare -m sh -c '" + mount + " && exec " + command + "'";
}

const std::string kGlooWarning = "collectives go through Gloo, not through shared memory: ";

void expect_one_warning_and_gloo(const ProcessResult& result, int64_t ranks) {
  const auto at = result.output.find(kGlooWarning);
  ASSERT_NE(at, std::string::npos) << result.output;
  EXPECT_EQ(result.output.find(kGlooWarning, at + 1), std::string::npos) << "said by rank 0 alone:\n" << result.output;
  EXPECT_NE(result.output.find("posix_fallocate", at), std::string::npos) << "with the reason:\n" << result.output;
  for (int64_t rank = 0; rank < ranks; ++rank) {
    const std::string line = "TRANSPORT rank=" + std::to_string(rank) + " all_reduce=process_group";
    EXPECT_NE(result.output.find(line), std::string::npos) << "no '" << line << "' in\n" << result.output;
  }
}

TEST(SharedMemoryFallback, ASmallDevShmLeavesTheGroupOnGlooWithAWarning) {
  TemporaryDirectory dir;
  const auto command = with_small_dev_shm(adam_train_command(
      dir.path(), "--batch-size 2 --model mlp --strategy ddp --devices 2 --max-epochs 1 --print-steps"));
  if (command.empty()) GTEST_SKIP() << "no mount namespace here (unshare -m needs root)";
  const auto result = run_command(command + " 2>&1", 240);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  expect_one_warning_and_gloo(result, 2);
}

// Two "hosts" of two processes (VOLT_HOST_ID): host 1's /dev/shm is too small, so the whole group
// stays on Gloo (HierarchicalAllReduce::join agrees on it over every rank).
TEST(SharedMemoryFallback, AHostThatCannotMapItsSegmentLeavesTheHierarchyOnGloo) {
  TemporaryDirectory dir;
  const std::string port = std::to_string(find_free_port());
  const auto node = [&](int rank) {
    return "VOLT_HOST_ID=node" + std::to_string(rank) + " " +
           adam_train_command(dir.path() + "/node" + std::to_string(rank),
                              "--batch-size 2 --model mlp --strategy ddp --devices 2 --num-nodes 2 --max-epochs 1 "
                              "--print-steps --master-addr 127.0.0.1 --master-port " + port + " --node-rank " +
                                  std::to_string(rank));
  };
  const auto small = with_small_dev_shm("env " + node(1));
  if (small.empty()) GTEST_SKIP() << "no mount namespace here (unshare -m needs root)";
  const auto result =
      run_command(small + " 2>&1 & " + node(0) + " 2>&1; a=$?; wait $!; b=$?; [ $a = 0 ] && [ $b = 0 ]", 300);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  expect_one_warning_and_gloo(result, 4);
  EXPECT_NE(result.output.find("host 1: "), std::string::npos) << "names the host:\n" << result.output;
}

// /dev/shm that holds the group's slots (3 of 4 MiB for 2 ranks, and a header) but not DDP's
// buffers for the 1 MiB model: the buckets are plain tensors reduced through the slots, trained to
// the end, and rank 0 says so once.
TEST(SharedMemoryFallback, DdpBuffersThatDoNotFitWarnOnceAndTrainThroughTheSlots) {
  TemporaryDirectory dir;
  const auto command = with_small_dev_shm(
      adam_train_command(dir.path(), "--batch-size 2 --model wide_mlp --strategy ddp --devices 2 --max-epochs 1"),
      "12352K");  // 12 MiB + 64 KiB
  if (command.empty()) GTEST_SKIP() << "no mount namespace here (unshare -m needs root)";
  const auto result = run_command(command + " 2>&1", 240);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(result.output.find(kGlooWarning), std::string::npos) << "the slots fit:\n" << result.output;
  const std::string warning = "buffers for reducing in place in shared memory could not be had (";
  const auto at = result.output.find(warning);
  ASSERT_NE(at, std::string::npos) << result.output;
  EXPECT_EQ(result.output.find(warning, at + 1), std::string::npos) << "once, by rank 0:\n" << result.output;
  EXPECT_NE(result.output.find("posix_fallocate", at), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("TRAINED rank=1"), std::string::npos) << result.output;
}

// Buffers that /dev/shm cannot hold: empty on every rank, with the reason, and no segment left.
TEST(SharedMemoryFallback, BuffersThatDoNotFitAreRefusedOnEveryRank) {
  with_communicators(2, [&](Communicator& c) {
    auto group = join_group(c);
    ASSERT_NE(group, nullptr);
    std::string why_not;
    const auto buffers =
        group->allocate_buffers(exchange_over(c), {int64_t{1} << 40}, {torch::kFloat}, &why_not);  // 2 × 4 TiB
    EXPECT_TRUE(buffers.empty()) << "rank " << c.rank();
    EXPECT_NE(why_not.find("posix_fallocate"), std::string::npos) << "rank " << c.rank() << ": " << why_not;
    // The group still reduces through its slots.
    auto t = torch::full({10}, static_cast<double>(c.rank() + 1));
    group->all_reduce(t, ReduceOp::Sum);
    EXPECT_TRUE(torch::equal(t, torch::full({10}, 3.0)));
    c.barrier();
    if (c.rank() == 0) {
      EXPECT_EQ(segments_of(::getpid()), 0) << "no name left in /dev/shm";
    }
  });
}

}  // namespace
}  // namespace volt::testing

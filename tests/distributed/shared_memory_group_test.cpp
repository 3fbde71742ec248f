// Note [Collectives through shared memory]: all_reduce through a segment every rank of the group
// maps gives each rank the reduction in rank order (the same bits on every rank), for every dtype
// and op it accepts, at sizes that span many chunks; reduce_scatter, all_gather (runs of any
// length) and broadcast match their definitions, directly and through the Communicator; a stalled rank fails the others within the
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
#include <functional>
#include <string>
#include <thread>

#include "core/error.h"
#include "distributed/communicator.h"
#include "distributed/network.h"
#include "distributed/transports/shared_memory_group.h"
#include "tests/distributed/shared_memory_support.h"
#include "tests/distributed/thread_ranks.h"
#include "tests/distributed/worker_runs.h"
#include "tests/support/test_support.h"

namespace volt {
namespace {

using testing::loopback_options;
using testing::TemporaryDirectory;
using testing::with_communicators;

using testing::join_group;
using testing::kSmallSlot;
using testing::segments_of;
using testing::values_of;

TEST(SharedMemoryGroup, AllReduceGivesEveryRankTheReductionInRankOrder) {
  for (const int64_t world : {2, 3}) {
    with_communicators(world, [&](Communicator& c) {
      auto group = join_group(c);
      ASSERT_NE(group, nullptr);
      for (const auto dtype : {torch::kFloat, torch::kDouble, torch::kInt, torch::kLong, torch::kHalf, torch::kBFloat16}) {
        for (const auto op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min}) {
          const bool floating = c10::isFloatingType(dtype);
          if (op == ReduceOp::Mean && !floating) {
            EXPECT_FALSE(SharedMemoryGroup::accepts(torch::ones({1}, dtype), op)) << "no Mean of integers";
            continue;
          }
          for (const int64_t numel : {int64_t{0}, int64_t{1}, int64_t{17}, int64_t{5000}}) {
            auto tensor = values_of(c.rank(), numel, dtype);
            // Expected: rank 0's values combined with rank 1's, then rank 2's (in float32 for
            // the 16-bit floats' sum, rounded once); Mean: that sum, divided once.
            const bool sum = op == ReduceOp::Sum || op == ReduceOp::Mean;
            const bool narrow = dtype == torch::kHalf || dtype == torch::kBFloat16;
            auto expected = values_of(0, numel, dtype).to(narrow && sum ? torch::kFloat : dtype);
            for (int64_t r = 1; r < world; ++r) {
              const auto other = values_of(r, numel, dtype);
              expected = sum                   ? expected + other
                         : op == ReduceOp::Max ? torch::maximum(expected, other.to(expected.scalar_type()))
                                               : torch::minimum(expected, other.to(expected.scalar_type()));
            }
            if (op == ReduceOp::Mean) expected = expected.div(world);
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
    auto group = join_group(c, size_t{1} << 16);
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
    auto group = join_group(c);
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
    auto group = join_group(c, kSmallSlot, std::chrono::milliseconds(1500));
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

// The data movements and reduce_scatter through the segment: runs of any length per rank (none
// too), across many chunks, every dtype, against their definitions; broadcast from each root.
TEST(SharedMemoryGroup, ReduceScatterAllGatherAndBroadcastAgreeWithTheirDefinitions) {
  for (const int64_t world : {2, 3}) {
    with_communicators(world, [&](Communicator& c) {
      auto group = join_group(c);
      ASSERT_NE(group, nullptr);
      const std::vector<std::vector<int64_t>> layouts =
          world == 2 ? std::vector<std::vector<int64_t>>{{1, 5000}, {2500, 2500}, {0, 0}}
                     : std::vector<std::vector<int64_t>>{{0, 5000, 17}, {1700, 1700, 1700}, {3, 0, 0}};
      for (const auto dtype : {torch::kFloat, torch::kDouble, torch::kLong, torch::kHalf, torch::kBFloat16}) {
        for (const auto& counts : layouts) {
          int64_t total = 0, mine = 0;
          for (int64_t r = 0; r < world; ++r) {
            if (r < c.rank()) mine += counts[static_cast<size_t>(r)];
            total += counts[static_cast<size_t>(r)];
          }
          const std::string where = "world " + std::to_string(world) + ", rank " + std::to_string(c.rank()) + ", " +
                                    c10::toString(dtype) + ", counts " + c10::str(counts);
          // reduce_scatter: the rank-order sum (16-bit floats in float32), this rank's run of it.
          const bool narrow = dtype == torch::kHalf || dtype == torch::kBFloat16;
          auto sum = values_of(0, total, dtype).to(narrow ? torch::kFloat : dtype);
          for (int64_t r = 1; r < world; ++r) sum = sum + values_of(r, total, dtype);
          auto out = torch::empty({counts[static_cast<size_t>(c.rank())]}, torch::TensorOptions().dtype(dtype));
          group->reduce_scatter(values_of(c.rank(), total, dtype), out, counts, ReduceOp::Sum);
          ASSERT_TRUE(torch::equal(out, sum.to(dtype).narrow(0, mine, out.numel()))) << "reduce_scatter, " << where;
          if (c10::isFloatingType(dtype)) {
            group->reduce_scatter(values_of(c.rank(), total, dtype), out, counts, ReduceOp::Mean);
            ASSERT_TRUE(torch::equal(out, sum.div(world).to(dtype).narrow(0, mine, out.numel())))
                << "reduce_scatter (mean), " << where;
          }
          // all_gather: rank r's run is values_of(r, counts[r]).
          std::vector<torch::Tensor> runs;
          for (int64_t r = 0; r < world; ++r) runs.push_back(values_of(r, counts[static_cast<size_t>(r)], dtype));
          auto gathered = torch::full({total}, -7, torch::TensorOptions().dtype(dtype));
          group->all_gather(runs[static_cast<size_t>(c.rank())], gathered, counts);
          ASSERT_TRUE(torch::equal(gathered, torch::cat(runs))) << "all_gather, " << where;
        }
        for (int64_t root = 0; root < world; ++root) {
          auto tensor = c.rank() == root ? values_of(root, 5003, dtype) : torch::zeros({5003}, torch::TensorOptions().dtype(dtype));
          group->broadcast(tensor, root);
          ASSERT_TRUE(torch::equal(tensor, values_of(root, 5003, dtype))) << "broadcast from " << root << ", rank " << c.rank();
        }
      }
      group->barrier();
    });
  }
}

// A rank leaves a barrier only once every rank has checked what the others called: one that raced
// ahead into its next collective could otherwise overwrite its call before a slower rank read it,
// which then failed on a mismatch that was not there (seen in DDP: a barrier before each step).
TEST(SharedMemoryGroup, BarriersBetweenOtherCollectivesAreNeverMistakenForThem) {
  with_communicators(3, [&](Communicator& c) {
    auto group = join_group(c);
    ASSERT_NE(group, nullptr);
    for (int i = 0; i < 3000; ++i) {
      group->barrier();
      auto one = torch::ones({1});
      group->all_reduce(one, ReduceOp::Sum);
      ASSERT_EQ(one.item<float>(), 3.0f) << "iteration " << i;
    }
  });
}

// reduce leaves the reduction on the root only (the others' tensors as they were), at sizes that
// span many chunks; ranks that name different roots fail naming both calls.
TEST(SharedMemoryGroup, ReduceLeavesTheResultOnTheRootOnly) {
  with_communicators(3, [&](Communicator& c) {
    auto group = join_group(c);
    ASSERT_NE(group, nullptr);
    const auto sum = (values_of(0, 5000, torch::kFloat) + values_of(1, 5000, torch::kFloat)) + values_of(2, 5000, torch::kFloat);
    for (int64_t root = 0; root < c.size(); ++root) {
      for (const auto op : {ReduceOp::Sum, ReduceOp::Mean}) {
        auto tensor = values_of(c.rank(), 5000, torch::kFloat);
        group->reduce(tensor, root, op);
        const auto expected = c.rank() != root ? values_of(c.rank(), 5000, torch::kFloat)
                              : op == ReduceOp::Mean ? sum.div(3) : sum;
        ASSERT_TRUE(torch::equal(tensor, expected)) << "root " << root << ", rank " << c.rank() << ", " << op_name(op);
      }
    }
    auto tensor = torch::ones({100});
    try {
      group->reduce(tensor, c.rank() == 2 ? 1 : 0, ReduceOp::Sum);
      ADD_FAILURE() << "expected a DistributedError on rank " << c.rank();
    } catch (const DistributedError& e) {
      const std::string other = c.rank() == 2 ? "rank 0 called a reduce of 100 Float elements (sum) (root 0)"
                                              : "rank 2 called a reduce of 100 Float elements (sum) (root 1)";
      EXPECT_NE(std::string(e.what()).find(other), std::string::npos) << e.what();
    }
  });
}

// A segment that /dev/shm cannot hold (a container's is 64 MB) is refused when it is created, on
// every rank, with the reason; the group would otherwise die of SIGBUS in its first large
// collective. Nothing is left behind.
TEST(SharedMemoryGroup, ASegmentTooLargeForDevShmIsRefusedAtJoin) {
  with_communicators(2, [&](Communicator& c) {
    std::string why_not;
    auto group = SharedMemoryGroup::join([&](const std::string& bytes) { return c.all_gather_bytes(bytes); },
                                         c.rank(), c.size(), std::chrono::seconds(30), "test group",
                                         size_t{1} << 42, &why_not);  // 3 × 4 TiB
    EXPECT_EQ(group, nullptr) << "rank " << c.rank();
    EXPECT_NE(why_not.find("posix_fallocate"), std::string::npos) << "rank " << c.rank() << ": " << why_not;
    c.barrier();
    if (c.rank() == 0) {
      EXPECT_EQ(segments_of(::getpid()), 0);
    }
  });
}

// Ranks whose calls disagree (another size, a barrier against an all_reduce) fail, naming the rank
// and both calls, instead of mixing two collectives' values.
TEST(SharedMemoryGroup, RanksThatCallDifferentCollectivesFailNamingBoth) {
  with_communicators(2, [&](Communicator& c) {
    auto group = join_group(c);
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
      // Mean: divided where it is summed, in float32 for bfloat16, rounded once.
      EXPECT_TRUE(torch::equal(mean, expected.div(3).to(dtype))) << dtype;
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

// With the option on, every collective the Communicator routes through the segment (all_reduce
// and reduce above; broadcast, all_gather in its three forms, reduce_scatter in its two, the
// barrier) gives what its definition says, async ones too, and is counted like over Gloo.
TEST(CommunicatorThroughSharedMemory, EveryRoutedCollectiveMatchesItsDefinition) {
  with_communicators(3, [](CommunicatorOptions& options) { options.shared_memory = true; }, [&](Communicator& c) {
    ASSERT_TRUE(c.reduces_through_shared_memory());
    const int64_t n = c.size();
    for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
      auto b = c.rank() == 1 ? values_of(1, 5000, dtype) : torch::zeros({5000}, torch::TensorOptions().dtype(dtype));
      c.broadcast(b, 1);
      EXPECT_TRUE(torch::equal(b, values_of(1, 5000, dtype))) << "broadcast, " << dtype;
      const auto gathered = c.all_gather(values_of(c.rank(), 70, dtype).reshape({7, 10}));
      ASSERT_EQ(gathered.sizes(), (std::vector<int64_t>{n, 7, 10}));
      for (int64_t r = 0; r < n; ++r) EXPECT_TRUE(torch::equal(gathered[r].reshape({-1}), values_of(r, 70, dtype)));
      auto into = torch::empty({n * 70}, torch::TensorOptions().dtype(dtype));
      c.all_gather_into_async(into, values_of(c.rank(), 70, dtype)).wait();
      EXPECT_TRUE(torch::equal(into, gathered.reshape({-1}))) << "all_gather_into, " << dtype;
      const std::vector<int64_t> counts{0, 4001, 13};
      auto flat = torch::zeros({4014}, torch::TensorOptions().dtype(dtype));
      std::vector<torch::Tensor> runs;
      for (int64_t r = 0; r < n; ++r) runs.push_back(values_of(r, counts[static_cast<size_t>(r)], dtype));
      flat.narrow(0, c.rank() == 2 ? 4001 : 0, counts[static_cast<size_t>(c.rank())]).copy_(runs[static_cast<size_t>(c.rank())]);
      c.all_gather_chunks(flat, counts);
      EXPECT_TRUE(torch::equal(flat, torch::cat(runs))) << "all_gather_chunks, " << dtype;
    }
    // reduce_scatter (Mean: the sum, divided) and its uneven form.
    const auto sum = (values_of(0, 3000, torch::kFloat) + values_of(1, 3000, torch::kFloat)) + values_of(2, 3000, torch::kFloat);
    const auto mean = c.reduce_scatter(values_of(c.rank(), 3000, torch::kFloat), ReduceOp::Mean);
    EXPECT_TRUE(torch::equal(mean, sum.narrow(0, c.rank() * 1000, 1000).div(3))) << "reduce_scatter Mean";
    const std::vector<int64_t> counts{2999, 0, 1};
    auto out = torch::empty({counts[static_cast<size_t>(c.rank())]});
    c.reduce_scatter_chunks(out, values_of(c.rank(), 3000, torch::kFloat), counts, ReduceOp::Sum);
    EXPECT_TRUE(torch::equal(out, sum.narrow(0, c.rank() == 2 ? 2999 : 0, out.numel()))) << "reduce_scatter_chunks";
    c.barrier();
    EXPECT_EQ(c.counters()[CollectiveKind::Broadcast].calls, 2);
    EXPECT_EQ(c.counters()[CollectiveKind::AllGather].calls, 6);
    EXPECT_EQ(c.counters()[CollectiveKind::ReduceScatter].calls, 2);
    EXPECT_EQ(c.counters()[CollectiveKind::Barrier].calls, 1);
  });
}

// The Trainer through shared memory (its default on one host): ddp on 2 processes trains, every
// rank after every step, bit for bit like over Gloo (a sum of two is the same in either order);
// --shared-memory-collectives false and VOLT_SHM=0 each turn it off.
TEST(CommunicatorThroughSharedMemory, DdpTrainsAsOverGlooAndTheOptionTurnsItOff) {
  TemporaryDirectory shm_dir, option_dir, env_dir;
  const std::string args = "--batch-size 2 --model mlp --strategy ddp --devices 2 --max-epochs 1 --print-steps";
  const auto through_shm = testing::run_command(testing::adam_train_command(shm_dir.path(), args), 240);
  ASSERT_EQ(through_shm.exit_code, 0) << through_shm.output;
  const auto by_option = testing::run_command(
      testing::adam_train_command(option_dir.path(), args + " --shared-memory-collectives false"), 240);
  ASSERT_EQ(by_option.exit_code, 0) << by_option.output;
  const auto by_env = testing::run_command("VOLT_SHM=0 " + testing::adam_train_command(env_dir.path(), args), 240);
  ASSERT_EQ(by_env.exit_code, 0) << by_env.output;
  const auto got = testing::step_lines(through_shm.output);
  ASSERT_EQ(got.size(), 2u) << through_shm.output;
  ASSERT_FALSE(got.begin()->second.empty()) << through_shm.output;
  testing::expect_steps_close(got, testing::step_lines(by_option.output), 0.0, "shared memory vs Gloo");
  testing::expect_steps_close(got, testing::step_lines(by_env.output), 0.0, "shared memory vs Gloo (VOLT_SHM=0)");
  // And each run went the way it says: the comparison means nothing if all took the same path.
  for (const auto& [run, expected] : {std::pair{&through_shm, "shared_memory"}, std::pair{&by_option, "process_group"},
                                      std::pair{&by_env, "process_group"}}) {
    for (int rank = 0; rank < 2; ++rank) {
      const std::string line = "TRANSPORT rank=" + std::to_string(rank) + " all_reduce=" + expected;
      EXPECT_NE(run->output.find(line), std::string::npos) << "no '" << line << "' in\n" << run->output;
    }
  }
  const auto bad = testing::run_command("VOLT_SHM=yes " + testing::adam_train_command(env_dir.path(), args), 240);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("VOLT_SHM: expected 0"), std::string::npos) << bad.output;
}

// Processes (a suite of its own, so that its process forks before any other test ran): rank 1
// dies by SIGKILL at several points, by its own hand or by the test's while both ranks are inside
// collectives; rank 0 fails naming it (and its pid) within a second or two of the death, and no
// segment of rank 0's is left in /dev/shm.
struct KillPoint {
  const char* name;
  bool killed_from_outside;  // by the test while both ranks loop over the collective
  // Both ranks run this; rank 1 dies after it (then rank 0 waits for it in a broadcast) or, killed
  // from outside, inside it.
  std::function<void(SharedMemoryGroup&, int64_t rank, const SharedMemoryGroup::Exchange&)> run;
};

// Monotonic seconds, comparable across the processes of this host (CLOCK_MONOTONIC).
double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Forks a process per rank of 2 that runs `body(rank)` with one intra-op thread (no pool after
// fork) and exits with what it returns; their pids, in rank order.
std::vector<pid_t> fork_two_ranks(const std::function<int(int64_t rank)>& body) {
  std::vector<pid_t> children;
  for (int64_t rank = 0; rank < 2; ++rank) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      torch::set_num_threads(1);
      ::_exit(body(rank));
    }
    EXPECT_GE(pid, 0) << "fork";
    children.push_back(pid);
  }
  return children;
}

TEST(SharedMemoryGroupKill, AKilledRankFailsTheOthersQuicklyAndLeavesNoSegment) {
  constexpr size_t kSlot = size_t{1} << 20;
  const auto big = [] { return torch::ones({int64_t{4} << 20}); };  // 16 MB: 16 chunks of 1 MiB
  const std::vector<KillPoint> points{
      {"right after joining", false,
       [](SharedMemoryGroup&, int64_t, const SharedMemoryGroup::Exchange&) {
         // Long enough for rank 0 to leave join's last exchange: this point is about the
         // collectives after it.
         std::this_thread::sleep_for(std::chrono::milliseconds(200));
       }},
      {"between two all_reduces", false,
       [](SharedMemoryGroup& g, int64_t, const SharedMemoryGroup::Exchange&) {
         auto t = torch::ones({1000});
         g.all_reduce(t, ReduceOp::Sum);
       }},
      {"inside 16 MB all_reduces", true,
       [&](SharedMemoryGroup& g, int64_t, const SharedMemoryGroup::Exchange&) {
         auto t = big();
         for (;;) g.all_reduce(t, ReduceOp::Max);
       }},
      {"inside 16 MB all_reduces in place", true,
       [&](SharedMemoryGroup& g, int64_t, const SharedMemoryGroup::Exchange& exchange) {
         auto t = g.allocate_buffers(exchange, {int64_t{4} << 20}, {torch::kFloat}).at(0);
         for (;;) g.all_reduce(t, ReduceOp::Sum);
       }},
      {"inside 16 MB all_gathers", true,
       [&](SharedMemoryGroup& g, int64_t, const SharedMemoryGroup::Exchange&) {
         auto in = big(), out = torch::empty({2 * in.numel()});
         for (;;) g.all_gather(in, out, {in.numel(), in.numel()});
       }},
      {"inside 16 MB reduce_scatters", true,
       [&](SharedMemoryGroup& g, int64_t, const SharedMemoryGroup::Exchange&) {
         auto in = big(), out = torch::empty({in.numel() / 2});
         for (;;) g.reduce_scatter(in, out, {in.numel() / 2, in.numel() / 2}, ReduceOp::Sum);
       }},
      {"inside barriers", true,
       [](SharedMemoryGroup& g, int64_t, const SharedMemoryGroup::Exchange&) {
         for (;;) g.barrier();
       }},
  };
  for (const auto& point : points) {
    SCOPED_TRACE(point.name);
    const int64_t port = find_free_port();
    int report[2], ready[2];
    ASSERT_EQ(::pipe(report), 0);
    ASSERT_EQ(::pipe(ready), 0);
    const auto children = fork_two_ranks([&](int64_t rank) {
      // The child exits with its verdict.
      ::close(report[0]);
      ::close(ready[0]);
      int code = 1;
      try {
        auto c = Communicator::connect(loopback_options(rank, 2, port, std::chrono::seconds(30)));
        const SharedMemoryGroup::Exchange exchange = [&](const std::string& b) { return c->all_gather_bytes(b); };
        auto group = SharedMemoryGroup::join(exchange, rank, 2, std::chrono::seconds(30), "test group", kSlot);
        if (rank == 1) {
          if (point.killed_from_outside) {
            (void)!::write(ready[1], "r", 1);
            point.run(*group, rank, exchange);  // until killed
          }
          point.run(*group, rank, exchange);
          ::raise(SIGKILL);
        }
        const double start = monotonic_seconds();
        try {
          if (point.killed_from_outside) {
            point.run(*group, rank, exchange);
          } else {
            point.run(*group, rank, exchange);  // what rank 1 did before it died
            auto t = torch::ones({1000});
            group->broadcast(t, 1);  // waits for rank 1
            group->all_reduce(t, ReduceOp::Sum);
          }
        } catch (const DistributedError& e) {
          const std::string message =
              std::string(e.what()) + "\nstarted " + std::to_string(start) + " failed " + std::to_string(monotonic_seconds()) + "\n";
          (void)!::write(report[1], message.data(), message.size());
          code = std::string(e.what()).find("rank 1 (pid ") != std::string::npos ? 0 : 2;
        }
      } catch (const std::exception& e) {
        const std::string message = std::string("rank ") + std::to_string(rank) + ": " + e.what() + "\n";
        (void)!::write(report[1], message.data(), message.size());
        code = 3;
      }
      return code;
    });
    ::close(report[1]);
    ::close(ready[1]);
    double killed_at = 0;
    if (point.killed_from_outside) {
      char byte = 0;
      ASSERT_EQ(::read(ready[0], &byte, 1), 1);
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // both ranks well inside the loop
      killed_at = monotonic_seconds();
      ::kill(children[1], SIGKILL);
    }
    ::close(ready[0]);
    int status0 = 0, status1 = 0;
    ::waitpid(children[0], &status0, 0);
    ::waitpid(children[1], &status1, 0);
    std::string message(8192, '\0');
    const auto got = ::read(report[0], message.data(), message.size());
    ::close(report[0]);
    message.resize(got > 0 ? static_cast<size_t>(got) : 0);
    EXPECT_TRUE(WIFSIGNALED(status1) && WTERMSIG(status1) == SIGKILL);
    ASSERT_TRUE(WIFEXITED(status0)) << message;
    EXPECT_EQ(WEXITSTATUS(status0), 0) << "rank 0's error: " << message;
    EXPECT_NE(message.find("is gone"), std::string::npos) << message;
    const auto failed_at = message.find("failed ");
    ASSERT_NE(failed_at, std::string::npos) << message;
    const double failed = std::stod(message.substr(failed_at + 7));
    const double since = point.killed_from_outside ? killed_at : std::stod(message.substr(message.find("started ") + 8));
    EXPECT_LT(failed - since, 2.0) << "rank 0 failed " << failed - since << " s after rank 1 died: " << message;
    std::printf("killed %s: rank 0 failed %.3f s after %s\n", point.name, failed - since,
                point.killed_from_outside ? "the kill" : "its call began");
    EXPECT_EQ(segments_of(children[0]), 0);
  }
}

// A peer that dies during the join (rank 0 has created the segment and waits for the others to
// map it): rank 0 fails, and its segment is gone with the failure, not left for the next group.
TEST(SharedMemoryGroupKill, APeerDyingDuringTheJoinLeavesNoSegment) {
  const int64_t port = find_free_port();
  const auto children = fork_two_ranks([&](int64_t rank) {
    int code = 1;
    try {
      auto c = Communicator::connect(loopback_options(rank, 2, port, std::chrono::seconds(30)));
      // Rank 1 dies at its second exchange of the join: after the hosts are compared, when rank 0
      // has created the segment and sends its name.
      int calls = 0;
      const SharedMemoryGroup::Exchange exchange = [&](const std::string& b) {
        if (rank == 1 && ++calls == 2) ::raise(SIGKILL);
        return c->all_gather_bytes(b);
      };
      std::string why_not;
      auto group = SharedMemoryGroup::join(exchange, rank, 2, std::chrono::seconds(30), "test group", size_t{1} << 20,
                                           &why_not);
      code = 2;  // the join should not succeed without rank 1
    } catch (const DistributedError&) {
      code = 0;
    }
    return code;
  });
  int status0 = 0, status1 = 0;
  ::waitpid(children[0], &status0, 0);
  ::waitpid(children[1], &status1, 0);
  EXPECT_TRUE(WIFSIGNALED(status1));
  ASSERT_TRUE(WIFEXITED(status0));
  EXPECT_EQ(WEXITSTATUS(status0), 0) << "rank 0's join fails on its dead peer";
  EXPECT_EQ(segments_of(children[0]), 0) << "rank 0's segment was left in /dev/shm";
}

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
  with_communicators(2, [&](Communicator& c) { ASSERT_NE(join_group(c), nullptr); });
  EXPECT_EQ(segments_of(dead), 0);
}

}  // namespace
}  // namespace volt

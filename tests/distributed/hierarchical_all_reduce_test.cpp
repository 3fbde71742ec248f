// Note [Hierarchical all_reduce]: ranks given different host ids (CommunicatorOptions::host_id,
// VOLT_HOST_ID) all_reduce through each host's segment and Gloo among the hosts' leaders: every
// dtype and op against the definition, every rank with the same bits, hosts of one rank and hosts
// whose ranks interleave, sub-groups; a stalled rank fails every other within the timeouts; the
// Trainer's ddp on two "hosts" of two processes each trains as over Gloo.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "distributed/communicator.h"
#include "distributed/network.h"
#include "tests/distributed/thread_ranks.h"
#include "tests/distributed/worker_runs.h"
#include "tests/support/test_support.h"

namespace volt {
namespace {

using testing::TemporaryDirectory;
using testing::with_communicators;

// Rank r's values: small integers, distinct per rank and element, so that every sum is exact in
// every dtype tested (bfloat16 too) and the reference needs no order.
torch::Tensor values_of(int64_t rank, int64_t numel, c10::ScalarType dtype) {
  return (torch::arange(numel, torch::kDouble).remainder(13) * (rank + 1) - 7 * rank).to(dtype);
}

// Runs `body` on ranks as threads whose host ids are `hosts` (one per rank), through shared memory.
void on_hosts(const std::vector<std::string>& hosts, const std::function<void(Communicator&)>& body,
              std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  with_communicators(
      static_cast<int64_t>(hosts.size()),
      [&](CommunicatorOptions& options) {
        options.shared_memory = true;
        options.host_id = hosts.at(static_cast<size_t>(options.rank));
      },
      body, timeout);
}

TEST(HierarchicalAllReduce, EveryRankGetsTheReductionOverEveryHostWithTheSameBits) {
  // Two hosts of two; a host of one beside one of two; hosts whose ranks interleave (leaders 0, 1).
  for (const auto& hosts : std::vector<std::vector<std::string>>{
           {"a", "a", "b", "b"}, {"a", "a", "b"}, {"a", "b", "a", "b", "a"}}) {
    const auto world = static_cast<int64_t>(hosts.size());
    on_hosts(hosts, [&](Communicator& c) {
      ASSERT_TRUE(c.reduces_through_shared_memory()) << "rank " << c.rank();
      for (const auto dtype : {torch::kFloat, torch::kDouble, torch::kLong, torch::kHalf, torch::kBFloat16}) {
        for (const auto op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min}) {
          if (op == ReduceOp::Mean && !c10::isFloatingType(dtype)) continue;
          for (const int64_t numel : {int64_t{0}, int64_t{1}, int64_t{5000}, (int64_t{1} << 20) + 3}) {
            if (numel > 5000 && op != ReduceOp::Sum) continue;  // many chunks: Sum is enough
            auto expected = values_of(0, numel, dtype).to(torch::kDouble);
            for (int64_t r = 1; r < world; ++r) {
              const auto other = values_of(r, numel, torch::kDouble);
              expected = op == ReduceOp::Max   ? torch::maximum(expected, other)
                         : op == ReduceOp::Min ? torch::minimum(expected, other)
                                               : expected + other;
            }
            if (op == ReduceOp::Mean) expected = expected / static_cast<double>(world);
            auto tensor = values_of(c.rank(), numel, dtype);
            c.all_reduce(tensor, op);
            const std::string where = "hosts " + std::to_string(world) + " ranks, rank " + std::to_string(c.rank()) +
                                      ", " + c10::toString(dtype) + ", " + op_name(op) + ", numel " +
                                      std::to_string(numel);
            if (op == ReduceOp::Mean) {
              // A quotient rounded once, or twice for the 16-bit floats (the leaders divide them).
              const double tolerance = dtype == torch::kFloat ? 1e-6 : dtype == torch::kDouble ? 1e-12 : 1e-2;
              ASSERT_TRUE(torch::allclose(tensor.to(torch::kDouble), expected, tolerance, tolerance)) << where;
            } else {
              ASSERT_TRUE(torch::equal(tensor, expected.to(dtype))) << where;
            }
            // The same bits everywhere.
            const auto all = c.all_gather(tensor);
            for (int64_t r = 1; r < world; ++r) ASSERT_TRUE(torch::equal(all[r], all[0])) << where << ", rank " << r;
          }
        }
      }
      auto handle = c.all_reduce_async(torch::ones({10}));
      EXPECT_TRUE(torch::equal(handle.wait(), torch::full({10}, static_cast<double>(world))));
    });
  }
}

// A group whose hosts hold one rank each, or whose ranks share one host, does not build it; a
// sub-group spanning hosts does.
TEST(HierarchicalAllReduce, OnlyGroupsSpanningHostsWithSeveralRanksOnOneUseIt) {
  on_hosts({"a", "b"}, [](Communicator& c) { EXPECT_FALSE(c.reduces_through_shared_memory()) << "one rank a host"; });
  on_hosts({"a", "a", "b", "b"}, [](Communicator& c) {
    auto pair = c.new_group({0, 2});  // hosts a and b, one rank each
    if (pair) {
      EXPECT_FALSE(pair->reduces_through_shared_memory());
    }
    auto three = c.new_group({0, 1, 3});
    if (three) {
      EXPECT_TRUE(three->reduces_through_shared_memory());
      auto t = torch::full({4097}, static_cast<double>(three->rank() + 1));
      three->all_reduce(t, ReduceOp::Sum);
      EXPECT_TRUE(torch::equal(t, torch::full({4097}, 6.0)));
    }
    auto local = c.new_group({2, 3});  // host b alone: the flat shared-memory group
    if (local) {
      EXPECT_TRUE(local->reduces_through_shared_memory());
    }
  });
}

// A rank that never calls: its host's leader fails at the timeout naming it, the other leader's
// network stage fails at its own, and that host's other rank at once after (its leader gave up
// the segment).
TEST(HierarchicalAllReduce, AStalledRankFailsEveryOtherWithinTheTimeouts) {
  std::atomic<bool> finished{false};
  std::atomic<int> failed{0};
  on_hosts(
      {"a", "a", "b", "b"},
      [&](Communicator& c) {
        if (c.rank() == 3) {
          while (!finished) std::this_thread::sleep_for(std::chrono::milliseconds(10));
          return;
        }
        const auto start = std::chrono::steady_clock::now();
        auto tensor = torch::ones({1000});
        try {
          c.all_reduce(tensor, ReduceOp::Sum);
          ADD_FAILURE() << "expected a DistributedError on rank " << c.rank();
        } catch (const DistributedError& e) {
          // Its leader names it: by its rank on the host (the segment's wait) or in the group (the
          // peer monitor, when the collective's own timeout comes first).
          const std::string what = e.what();
          if (c.rank() == 2) {
            EXPECT_TRUE(what.find("rank 1 did not arrive within") != std::string::npos ||
                        what.find("Rank 3 is alive but has started only 0 collective(s)") != std::string::npos)
                << what;
          }
        }
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15)) << "rank " << c.rank();
        if (++failed == 3) finished = true;
      },
      std::chrono::seconds(2));
}

// The Trainer on two "hosts" of two processes each (two launchers, VOLT_HOST_ID apart): ddp's
// all_reduce goes hierarchically on every rank and trains as over Gloo (VOLT_SHM=0), every rank
// after every step, within float rounding (the sums' order differs).
TEST(HierarchicalAllReduce, DdpOnTwoHostsOfTwoProcessesTrainsAsOverGloo) {
  TemporaryDirectory hierarchical_dir, gloo_dir;
  const auto run = [](const std::string& root, const std::string& environment) {
    const std::string port = std::to_string(find_free_port());
    const auto node = [&](int rank) {
      return environment + " VOLT_HOST_ID=node" + std::to_string(rank) + " " +
             testing::adam_train_command(root + "/node" + std::to_string(rank),
                                         "--batch-size 2 --model mlp --strategy ddp --devices 2 --num-nodes 2 "
                                         "--max-epochs 1 --print-steps --master-addr 127.0.0.1 --master-port " +
                                             port + " --node-rank " + std::to_string(rank));
    };
    return testing::run_command(node(1) + " & " + node(0) + "; a=$?; wait $!; b=$?; [ $a = 0 ] && [ $b = 0 ]", 300);
  };
  const auto hierarchical = run(hierarchical_dir.path(), "");
  ASSERT_EQ(hierarchical.exit_code, 0) << hierarchical.output;
  const auto gloo = run(gloo_dir.path(), "VOLT_SHM=0");
  ASSERT_EQ(gloo.exit_code, 0) << gloo.output;
  const auto got = testing::step_lines(hierarchical.output);
  ASSERT_EQ(got.size(), 4u) << hierarchical.output;
  ASSERT_FALSE(got.begin()->second.empty()) << hierarchical.output;
  testing::expect_steps_close(got, testing::step_lines(gloo.output), 1e-5, "hierarchical vs Gloo");
  for (int rank = 0; rank < 4; ++rank) {
    for (const auto& [output, expected] : {std::pair{&hierarchical.output, "shared_memory"},
                                           std::pair{&gloo.output, "process_group"}}) {
      const std::string line = "TRANSPORT rank=" + std::to_string(rank) + " all_reduce=" + expected;
      EXPECT_NE(output->find(line), std::string::npos) << "no '" << line << "' in\n" << *output;
    }
  }
}

}  // namespace
}  // namespace volt

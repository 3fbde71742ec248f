// Every collective against closed-form values, world sizes 2-4, ranks as threads over Gloo.
#include <gtest/gtest.h>

#include <thread>

#include "distributed/communicator.h"
#include "tests/distributed/thread_ranks.h"
#include "core/error.h"

namespace volt {
namespace {

using testing::with_communicators;

class CollectivesTest : public ::testing::TestWithParam<int64_t> {};

// Rank r holds r + [0, 1, 2, 3, 4]; over n ranks the sum is n·i + n(n-1)/2, the max i + n - 1.
torch::Tensor rank_values(int64_t rank) { return torch::arange(5, torch::kFloat) + static_cast<double>(rank); }

TEST_P(CollectivesTest, AllReduceMatchesClosedForm) {
  const int64_t n = GetParam();
  with_communicators(n, [&](Communicator& c) {
    const auto i = torch::arange(5, torch::kFloat);
    const double triangle = static_cast<double>(n * (n - 1) / 2);
    auto sum = rank_values(c.rank());
    c.all_reduce(sum, ReduceOp::Sum);
    EXPECT_TRUE(torch::equal(sum, i * static_cast<double>(n) + triangle)) << "rank " << c.rank() << " " << sum;
    auto mean = rank_values(c.rank());
    c.all_reduce(mean, ReduceOp::Mean);
    EXPECT_TRUE(torch::allclose(mean, i + triangle / static_cast<double>(n))) << "rank " << c.rank() << " " << mean;
    auto max = rank_values(c.rank());
    c.all_reduce(max, ReduceOp::Max);
    EXPECT_TRUE(torch::equal(max, i + static_cast<double>(n - 1))) << "rank " << c.rank();
    auto min = rank_values(c.rank());
    c.all_reduce(min, ReduceOp::Min);
    EXPECT_TRUE(torch::equal(min, i)) << "rank " << c.rank();
    auto ints = torch::full({3}, c.rank() + 1, torch::kLong);
    c.all_reduce(ints, ReduceOp::Sum);
    EXPECT_TRUE(torch::equal(ints, torch::full({3}, n * (n + 1) / 2, torch::kLong)));
  });
}

TEST_P(CollectivesTest, BroadcastCopiesTheRootsTensor) {
  const int64_t n = GetParam();
  with_communicators(n, [&](Communicator& c) {
    for (int64_t root = 0; root < n; ++root) {
      auto t = torch::full({2, 3}, static_cast<double>(c.rank() * 10 + root), torch::kDouble);
      c.broadcast(t, root);
      EXPECT_TRUE(torch::equal(t, torch::full({2, 3}, static_cast<double>(root * 10 + root), torch::kDouble)))
          << "rank " << c.rank() << " root " << root;
    }
  });
}

TEST_P(CollectivesTest, AllGatherStacksEveryRanksTensor) {
  const int64_t n = GetParam();
  with_communicators(n, [&](Communicator& c) {
    const auto gathered = c.all_gather(torch::full({2, 2}, static_cast<double>(c.rank() * c.rank()), torch::kFloat));
    ASSERT_EQ(gathered.sizes(), (std::vector<int64_t>{n, 2, 2}));
    for (int64_t r = 0; r < n; ++r) {
      EXPECT_TRUE(torch::equal(gathered[r], torch::full({2, 2}, static_cast<double>(r * r), torch::kFloat)))
          << "rank " << c.rank() << " slot " << r;
    }
  });
}

TEST_P(CollectivesTest, ReduceScatterGivesEachRankItsReducedChunk) {
  const int64_t n = GetParam();
  with_communicators(n, [&](Communicator& c) {
    // input[j] = j + 100·rank for j < 2n; chunk r is rows 2r, 2r+1; summed over ranks:
    // n·j + 100·n(n-1)/2.
    const auto input = torch::arange(2 * n, torch::kDouble).unsqueeze(1).repeat({1, 3}) + 100.0 * c.rank();
    const auto sum = c.reduce_scatter(input, ReduceOp::Sum);
    const auto rows = torch::arange(2 * c.rank(), 2 * c.rank() + 2, torch::kDouble).unsqueeze(1).repeat({1, 3});
    EXPECT_TRUE(torch::equal(sum, rows * static_cast<double>(n) + 100.0 * static_cast<double>(n * (n - 1) / 2)))
        << "rank " << c.rank() << " " << sum;
    const auto mean = c.reduce_scatter(input, ReduceOp::Mean);
    EXPECT_TRUE(torch::allclose(mean, rows + 100.0 * static_cast<double>(n - 1) / 2.0)) << "rank " << c.rank();
    // The input is not modified.
    EXPECT_TRUE(torch::equal(input, torch::arange(2 * n, torch::kDouble).unsqueeze(1).repeat({1, 3}) + 100.0 * c.rank()));
  });
}

TEST_P(CollectivesTest, ReduceLandsOnTheRoot) {
  const int64_t n = GetParam();
  with_communicators(n, [&](Communicator& c) {
    const int64_t root = n - 1;
    auto t = torch::full({4}, static_cast<double>(c.rank() + 1), torch::kFloat);
    c.reduce(t, root, ReduceOp::Sum);
    if (c.rank() == root) {
      EXPECT_TRUE(torch::equal(t, torch::full({4}, static_cast<double>(n * (n + 1) / 2), torch::kFloat)));
    }
    auto m = torch::full({4}, static_cast<double>(c.rank() + 1), torch::kFloat);
    c.reduce(m, 0, ReduceOp::Max);
    if (c.rank() == 0) {
      EXPECT_TRUE(torch::equal(m, torch::full({4}, static_cast<double>(n), torch::kFloat)));
    }
  });
}

TEST_P(CollectivesTest, AsyncFormsCompleteInAnyWaitOrderAndChainContinuations) {
  const int64_t n = GetParam();
  with_communicators(n, [&](Communicator& c) {
    auto a = torch::ones({1000}) * static_cast<double>(c.rank());
    auto b = torch::ones({10});
    auto handle_a = c.all_reduce_async(a, ReduceOp::Sum);
    auto handle_b = c.all_reduce_async(b, ReduceOp::Sum).then([](const torch::Tensor& t) { return t * 2; });
    auto handle_gather = c.all_gather_async(torch::tensor({c.rank()}, torch::kLong));
    auto doubled = handle_b.wait();  // waited before the earlier one
    EXPECT_TRUE(torch::equal(doubled, torch::full({10}, 2.0 * static_cast<double>(n))));
    EXPECT_TRUE(torch::equal(handle_b.wait(), doubled)) << "waiting twice returns the same result";
    handle_a.wait();
    EXPECT_TRUE(handle_a.is_completed());
    EXPECT_TRUE(torch::equal(a, torch::full({1000}, static_cast<double>(n * (n - 1) / 2))));
    EXPECT_TRUE(torch::equal(handle_gather.wait().flatten(), torch::arange(n, torch::kLong)));
    c.barrier_async().wait();
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, CollectivesTest, ::testing::Values(2, 3, 4),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

TEST(CommunicatorTest, NonContiguousTensorsAreReducedInPlace) {
  with_communicators(2, [](Communicator& c) {
    auto base = torch::arange(6, torch::kFloat).reshape({2, 3}) * static_cast<double>(c.rank() + 1);
    auto transposed = base.t();
    ASSERT_FALSE(transposed.is_contiguous());
    c.all_reduce(transposed, ReduceOp::Sum);
    EXPECT_TRUE(torch::equal(base, torch::arange(6, torch::kFloat).reshape({2, 3}) * 3.0));
  });
}

// Tensors without elements (a rank's empty shard, an empty list of values) go through every
// collective and come back with their shapes, over Gloo and through shared memory; Gloo's own
// all_gather and gather divide by the element count (SIGFPE), so volt does not hand them such a tensor.
TEST(CommunicatorTest, EmptyTensorsGoThroughEveryCollective) {
  for (const bool shared_memory : {false, true}) {
    with_communicators(3, [&](CommunicatorOptions& options) { options.shared_memory = shared_memory; },
                       [&](Communicator& c) {
      const std::string how = shared_memory ? "through shared memory" : "over Gloo";
      auto empty = torch::empty({0, 4});
      c.all_reduce(empty, ReduceOp::Sum);
      c.broadcast(empty, 1);
      c.reduce(empty, 0, ReduceOp::Sum);
      EXPECT_EQ(empty.sizes(), (std::vector<int64_t>{0, 4})) << how;
      EXPECT_EQ(c.all_gather(empty).sizes(), (std::vector<int64_t>{3, 0, 4})) << how;
      const auto gathered = c.gather(empty, 2);
      if (c.rank() == 2) {
        EXPECT_EQ(gathered.sizes(), (std::vector<int64_t>{3, 0, 4})) << how;
      }
      EXPECT_EQ(c.reduce_scatter(torch::empty({0}), ReduceOp::Sum).numel(), 0) << how;
      auto flat = torch::empty({0});
      c.all_gather_chunks(flat, {0, 0, 0});
      EXPECT_EQ(c.all_gather_bytes("").size(), 3u) << how;
      EXPECT_EQ(c.counters()[CollectiveKind::AllGather].calls, 3) << how << ": counted like any other";
    });
  }
}

TEST(CommunicatorTest, BarrierWaitsForTheLastRank) {
  std::atomic<int64_t> released_before_sleeper{0};
  std::atomic<bool> sleeper_arrived{false};
  with_communicators(3, [&](Communicator& c) {
    if (c.rank() == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      sleeper_arrived = true;
    }
    c.barrier();
    if (!sleeper_arrived) ++released_before_sleeper;
  });
  EXPECT_EQ(released_before_sleeper.load(), 0);
}

TEST(CommunicatorTest, CountersCountCallsAndPayloadBytesPerKind) {
  with_communicators(2, [](Communicator& c) {
    auto f = torch::zeros({100}, torch::kFloat);   // 400 bytes
    auto d = torch::zeros({10}, torch::kDouble);   // 80 bytes
    c.all_reduce(f);
    c.all_reduce(d);
    c.broadcast(f, 0);
    c.all_gather(d);
    c.reduce_scatter(torch::zeros({4, 5}, torch::kFloat));  // 80 bytes
    c.reduce(f, 1);
    c.barrier();
    c.all_gather_into(torch::empty({200}), f);                                   // 400 bytes
    c.reduce_scatter_into(torch::empty({10}, torch::kDouble), torch::zeros({20}, torch::kDouble));  // 160
    c.gather(torch::zeros({8}, torch::kInt), 1);                                 // 32
    const auto counters = c.counters();
    EXPECT_EQ(counters[CollectiveKind::AllReduce].calls, 2);
    EXPECT_EQ(counters[CollectiveKind::AllReduce].bytes, 480);
    EXPECT_EQ(counters[CollectiveKind::Broadcast].bytes, 400);
    EXPECT_EQ(counters[CollectiveKind::AllGather].calls, 2);
    EXPECT_EQ(counters[CollectiveKind::AllGather].bytes, 480);
    EXPECT_EQ(counters[CollectiveKind::ReduceScatter].calls, 2);
    EXPECT_EQ(counters[CollectiveKind::ReduceScatter].bytes, 240);
    EXPECT_EQ(counters[CollectiveKind::Reduce].bytes, 400);
    EXPECT_EQ(counters[CollectiveKind::Barrier].calls, 1);
    EXPECT_EQ(counters[CollectiveKind::Barrier].bytes, 0);
    EXPECT_EQ(counters[CollectiveKind::Gather].calls, 1);
    EXPECT_EQ(counters[CollectiveKind::Gather].bytes, 32);
    EXPECT_EQ(counters.total_calls(), 10);
    EXPECT_EQ(counters.total_bytes(), 2032);
    const auto metrics = counters.as_metrics("comm/");
    EXPECT_EQ(metrics.at("comm/all_reduce_bytes"), 480.0);
    EXPECT_EQ(metrics.at("comm/gather_bytes"), 32.0);
    EXPECT_EQ(metrics.at("comm/bytes"), 2032.0);
    const auto before = c.counters();
    c.all_reduce(f);
    EXPECT_EQ((c.counters() - before).total_bytes(), 400);
    c.reset_counters();
    EXPECT_EQ(c.counters().total_calls(), 0);
  });
}

TEST(CommunicatorTest, SubGroupOverAnyRankList) {
  with_communicators(4, [](Communicator& c) {
    auto odd = c.new_group({3, 1});
    auto all_but_zero = c.new_group({1, 2, 3});
    if (c.rank() % 2 == 1) {
      ASSERT_NE(odd, nullptr);
      EXPECT_EQ(odd->size(), 2);
      EXPECT_EQ(odd->rank(), c.rank() / 2);
      EXPECT_EQ(odd->global_ranks(), (std::vector<int64_t>{1, 3}));
      auto t = torch::tensor({static_cast<double>(c.rank())});
      odd->all_reduce(t);
      EXPECT_EQ(t.item<double>(), 4.0);
      auto g = odd->all_gather(torch::tensor({c.rank()}, torch::kLong));
      EXPECT_TRUE(torch::equal(g.flatten(), torch::tensor({1, 3}, torch::kLong)));
    } else {
      EXPECT_EQ(odd, nullptr);
    }
    if (c.rank() == 0) {
      EXPECT_EQ(all_but_zero, nullptr);
    } else {
      auto t = torch::tensor({static_cast<double>(c.rank())});
      all_but_zero->all_reduce(t);
      EXPECT_EQ(t.item<double>(), 6.0);
      // A group of a group: global ranks map through.
      auto nested = all_but_zero->new_group({0, 2});
      if (c.rank() == 1 || c.rank() == 3) {
        ASSERT_NE(nested, nullptr);
        EXPECT_EQ(nested->global_ranks(), (std::vector<int64_t>{1, 3}));
        auto u = torch::tensor({1.0});
        nested->all_reduce(u);
        EXPECT_EQ(u.item<double>(), 2.0);
      } else {
        EXPECT_EQ(nested, nullptr);
      }
    }
    // The parent still works after sub-groups were used.
    auto whole = torch::tensor({1.0});
    c.all_reduce(whole);
    EXPECT_EQ(whole.item<double>(), 4.0);
  });
}

// Note [Entering c10d from several threads]: LibTorch 2.x's flight recorder registers a group at
// its first collective without a lock. Here each of 4 threads makes 40 groups of its own, then all
// start the groups' first collectives at once (without volt's C10dEntry this crashed in std::map's
// insertion, or lost groups from it, within a few rounds).
TEST(CommunicatorTest, GroupsStartingTheirFirstCollectivesOnManyThreadsAtOnce) {
  with_communicators(4, [](Communicator& c) {
    for (int round = 0; round < 10; ++round) {
      std::vector<std::shared_ptr<Communicator>> mine;
      for (int k = 0; k < 40; ++k) {
        for (int64_t r = 0; r < c.size(); ++r) {
          if (auto group = c.new_group({r})) mine.push_back(std::move(group));
        }
      }
      ASSERT_EQ(mine.size(), 40u) << "rank " << c.rank();
      c.barrier();  // the 4 threads leave it together
      for (size_t k = 0; k < mine.size(); ++k) {
        auto t = torch::full({4}, static_cast<double>(c.rank()));
        mine[k]->all_reduce(t);
        ASSERT_TRUE(torch::equal(t, torch::full({4}, static_cast<double>(c.rank()))))
            << "rank " << c.rank() << ", round " << round << ", group " << k;
      }
    }
  });
}

TEST(CommunicatorTest, NodeGroupsSplitByNodeAndPickLeaders) {
  // Nodes interleaved on purpose: ranks 0 and 2 on node 1, ranks 1 and 3 on node 0.
  with_communicators(4, [](Communicator& c) {
    const int64_t node = c.rank() % 2 == 0 ? 1 : 0;
    auto groups = c.node_groups(node);
    ASSERT_NE(groups.local, nullptr);
    EXPECT_EQ(groups.local->global_ranks(), node == 1 ? (std::vector<int64_t>{0, 2}) : (std::vector<int64_t>{1, 3}));
    auto t = torch::tensor({static_cast<double>(c.rank())});
    groups.local->all_reduce(t);
    EXPECT_EQ(t.item<double>(), node == 1 ? 2.0 : 4.0);
    // Leaders: the lowest rank of each node: 1 (node 0) and 0 (node 1).
    if (c.rank() <= 1) {
      ASSERT_NE(groups.leaders, nullptr);
      EXPECT_EQ(groups.leaders->global_ranks(), (std::vector<int64_t>{0, 1}));
      auto u = torch::tensor({10.0 + static_cast<double>(c.rank())});
      groups.leaders->all_reduce(u);
      EXPECT_EQ(u.item<double>(), 21.0);
    } else {
      EXPECT_EQ(groups.leaders, nullptr);
    }
  });
}

TEST(CommunicatorTest, BadArgumentsAreConfigurationErrors) {
  with_communicators(2, [](Communicator& c) {
    auto ints = torch::ones({2}, torch::kLong);
    EXPECT_THROW(c.all_reduce(ints, ReduceOp::Mean), ConfigurationError);
    auto t = torch::ones({3});
    EXPECT_THROW(c.broadcast(t, 2), ConfigurationError);
    EXPECT_THROW(c.reduce_scatter(torch::ones({3})), ConfigurationError);  // 3 rows over 2 ranks
    EXPECT_THROW(c.new_group({0, 0}), ConfigurationError);
    EXPECT_THROW(c.new_group({2}), ConfigurationError);
    try {
      c.reduce_scatter(torch::ones({3}));
    } catch (const ConfigurationError& e) {
      EXPECT_NE(std::string(e.what()).find("multiple of the group size 2"), std::string::npos) << e.what();
    }
    c.barrier();  // both ranks are still in step: the failed calls sent nothing
  });
  CommunicatorOptions options;
  options.rank = 2;
  options.world_size = 2;
  EXPECT_THROW(options.validate(), ConfigurationError);
  options.rank = 0;
  options.master_port = 70000;
  EXPECT_THROW(options.validate(), ConfigurationError);
  options.master_port = 29500;
  options.backend = "mpi";
  EXPECT_THROW(options.validate(), ConfigurationError);
}

}  // namespace
}  // namespace volt

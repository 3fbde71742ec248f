// Note [Chained collectives]: CollectiveHandle::then_collective runs its continuation on the
// waiting thread, inside wait(), and waits the collective it starts. PowerSGD's shape (all_reduce
// P, orthogonalize, all_reduce Q) on several buckets waited in order, on the inline and the
// process-group paths, against values computed by hand; and a chain whose second step fails on
// one rank fails the peer with a DistributedError, quickly, instead of hanging.
#include <gtest/gtest.h>

#include <thread>

#include "core/error.h"
#include "distributed/communicator.h"
#include "tests/distributed/thread_ranks.h"

namespace volt {
namespace {

using Clock = std::chrono::steady_clock;
using testing::loopback_options;
using testing::run_thread_ranks;

// Bucket b on rank r: P = (r + 1)·(b + 1)·ones(numel). Over n ranks P sums to
// (b + 1)·n(n+1)/2; "orthogonalized" (divided by its first element) it is ones; Q = that times
// (r + b) sums to n·b + n(n-1)/2 per element.
CollectiveHandle powersgd_like(Communicator& c, int64_t bucket, int64_t numel, std::vector<int64_t>* order) {
  auto p = torch::full({numel}, static_cast<double>((c.rank() + 1) * (bucket + 1)));
  return c.all_reduce_async(p).then_collective([&c, bucket, order](const torch::Tensor& summed) {
    order->push_back(bucket);
    auto q = (summed / summed[0]) * static_cast<double>(c.rank() + bucket);
    return c.all_reduce_async(q);
  });
}

void expect_chains_complete_in_wait_order(int64_t world, int64_t numel, int64_t inline_max_bytes) {
  const auto errors = run_thread_ranks(world, [&](int64_t rank, int64_t port) {
    auto options = loopback_options(rank, world, port);
    options.inline_all_reduce_max_bytes = inline_max_bytes;
    auto c = Communicator::connect(options);
    const int64_t n = c->size();
    std::vector<int64_t> continuation_order;
    std::vector<CollectiveHandle> handles;
    for (int64_t b = 0; b < 4; ++b) handles.push_back(powersgd_like(*c, b, numel, &continuation_order));
    // A third round on the last chain, and a plain transformation after it.
    handles.back() = std::move(handles.back())
                         .then_collective([&c](const torch::Tensor& q) { return c->all_reduce_async(q * 0.0 + 1.0); })
                         .then([](const torch::Tensor& t) { return t * 10.0; });
    EXPECT_TRUE(continuation_order.empty()) << "rank " << rank << ": continuations run only inside wait()";
    EXPECT_FALSE(handles[0].is_completed()) << "a chained collective has not started yet";
    for (int64_t b = 0; b < 4; ++b) {
      const auto result = handles[static_cast<size_t>(b)].wait();
      const double expected = b == 3 ? 10.0 * static_cast<double>(n) : static_cast<double>(n * b + n * (n - 1) / 2);
      EXPECT_TRUE(torch::equal(result, torch::full({numel}, expected, torch::kFloat)))
          << "rank " << rank << " bucket " << b << ": " << result.slice(0, 0, 3);
      EXPECT_TRUE(handles[static_cast<size_t>(b)].is_completed());
      EXPECT_TRUE(torch::equal(handles[static_cast<size_t>(b)].wait(), result)) << "waiting again";
    }
    EXPECT_EQ(continuation_order, (std::vector<int64_t>{0, 1, 2, 3})) << "rank " << rank;
    EXPECT_EQ(c->counters()[CollectiveKind::AllReduce].calls, 9) << "rank " << rank;
    // A chain on an empty (complete) handle also waits for wait().
    bool ran = false;
    auto on_empty = CollectiveHandle().then_collective([&](const torch::Tensor& t) {
      ran = true;
      EXPECT_FALSE(t.defined());
      return c->all_reduce_async(torch::ones({2}));
    });
    EXPECT_FALSE(ran);
    EXPECT_TRUE(torch::equal(on_empty.wait(), torch::full({2}, static_cast<float>(n))));
  });
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

TEST(ChainedCollectivesTest, InlinePathTwoRanks) { expect_chains_complete_in_wait_order(2, 16, 1 << 20); }

TEST(ChainedCollectivesTest, InlinePathThreeRanks) { expect_chains_complete_in_wait_order(3, 16, 1 << 20); }

TEST(ChainedCollectivesTest, ProcessGroupPathTwoRanks) { expect_chains_complete_in_wait_order(2, 300 * 1024, 0); }

// Rank 1's second continuation throws before starting its collective (as an orthogonalization
// that fails would), and rank 1 leaves: rank 0, already waiting in that chain's second
// all_reduce, must fail with a DistributedError naming it, long before the timeout.
void expect_failure_inside_a_chain_fails_the_peer(int64_t numel, int64_t inline_max_bytes, bool shared_memory = false) {
  const auto timeout = std::chrono::seconds(300);
  std::string rank0_error, rank1_error;
  double rank0_failed_after = -1;
  const auto errors = run_thread_ranks(2, [&](int64_t rank, int64_t port) {
    auto options = loopback_options(rank, 2, port, timeout);
    options.inline_all_reduce_max_bytes = inline_max_bytes;
    options.shared_memory = shared_memory;
    auto c = Communicator::connect(options);
    std::vector<CollectiveHandle> handles;
    for (int64_t b = 0; b < 3; ++b) {
      handles.push_back(c->all_reduce_async(torch::ones({numel})).then_collective([&, b](const torch::Tensor& t) {
        if (rank == 1 && b == 1) throw std::runtime_error("orthogonalization failed on rank 1");
        return c->all_reduce_async(t * 2.0);
      }));
    }
    EXPECT_TRUE(torch::equal(handles[0].wait(), torch::full({numel}, 8.0f))) << "rank " << rank;
    const auto start = Clock::now();
    try {
      handles[1].wait();
    } catch (const DistributedError& e) {
      rank0_failed_after = std::chrono::duration<double>(Clock::now() - start).count();
      rank0_error = e.what();
    } catch (const std::runtime_error& e) {
      rank1_error = e.what();
    }
    if (rank == 1) {
      EXPECT_THROW(handles[1].wait(), std::runtime_error) << "waiting again rethrows";
      c->report_failure(rank1_error);
    }
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  EXPECT_EQ(rank1_error, "orthogonalization failed on rank 1");
  ASSERT_GE(rank0_failed_after, 0) << "rank 0's chained all_reduce did not fail";
  // Seconds, not the 300 s timeout: a bound far from both, so that load cannot cross it.
  EXPECT_LT(rank0_failed_after, 60.0) << "the peer's departure, not the 300 s timeout, ends it";
  EXPECT_NE(rank0_error.find("Communicator (rank 0 of 2): all_reduce #"), std::string::npos) << rank0_error;
  EXPECT_NE(rank0_error.find("(started by a continuation of Communicator (rank 0 of 2): all_reduce #2"),
            std::string::npos)
      << rank0_error;
}

TEST(ChainedCollectivesTest, FailureInsideAChainOnTheInlinePath) {
#if !defined(VOLT_WITH_INLINE_GLOO)
  GTEST_SKIP() << "the inline path is compiled out in this build (cmake/torch_features.cmake)";
#endif
  expect_failure_inside_a_chain_fails_the_peer(16, 1 << 20);
}

TEST(ChainedCollectivesTest, FailureInsideAChainOnTheProcessGroupPath) {
  expect_failure_inside_a_chain_fails_the_peer(300 * 1024, 0);
}

TEST(ChainedCollectivesTest, FailureInsideAChainThroughSharedMemory) {
  expect_failure_inside_a_chain_fails_the_peer(300 * 1024, 0, /*shared_memory=*/true);
}

}  // namespace
}  // namespace volt

// Note [Inline all_reduce]: small Gloo all_reduces run on the calling thread, larger ones on the
// process group's worker thread; both paths give the same results, in any interleaving, and the
// option turns the inline path off.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "distributed/communicator.h"
#include "tests/distributed/thread_ranks.h"
#include "core/error.h"

namespace volt {
namespace {

using testing::loopback_options;
using testing::run_thread_ranks;
using testing::with_communicators;

constexpr int64_t kSmall = 256;        // 1 KiB of float: inline by default
constexpr int64_t kLarge = 512 * 1024;  // 2 MiB of float: above the default 1 MiB

// Rank 1 calls its all_reduce only once rank 0's all_reduce_async returned, or after `patience`
// at the latest; rank 0 records whether rank 1 had called by the time its call returned. An
// inline all_reduce cannot return before its peer called (whatever the patience); an
// asynchronous one returns at once, so a long patience costs nothing and no load on the machine
// can make rank 1 call first.
bool returned_after_the_peer_called(int64_t numel, int64_t inline_max_bytes, std::chrono::seconds patience) {
  std::atomic<bool> peer_called{false}, rank0_returned{false}, after{false};
  const auto errors = run_thread_ranks(2, [&](int64_t rank, int64_t port) {
    auto options = loopback_options(rank, 2, port, std::chrono::seconds(120));
    options.inline_all_reduce_max_bytes = inline_max_bytes;
    options.shared_memory = false;  // the inline Gloo path is what is tested
    auto c = Communicator::connect(options);
    c->barrier();
    auto t = torch::full({numel}, static_cast<double>(rank + 1));
    if (rank == 1) {
      const auto until = std::chrono::steady_clock::now() + patience;
      while (!rank0_returned && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      peer_called = true;
    }
    auto handle = c->all_reduce_async(t);
    if (rank == 0) {
      after = peer_called.load();
      rank0_returned = true;
    }
    EXPECT_TRUE(torch::equal(handle.wait(), torch::full({numel}, 3.0))) << "rank " << rank;
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  return after;
}

TEST(InlineAllReduceTest, SmallOnesRunOnTheCallingThread) {
#if !defined(VOLT_WITH_INLINE_GLOO)
  GTEST_SKIP() << "this LibTorch embeds its own Gloo: the inline path is compiled out "
                  "(cmake/torch_features.cmake)";
#endif
  EXPECT_TRUE(returned_after_the_peer_called(kSmall, 1 << 20, std::chrono::seconds(1)));
}

TEST(InlineAllReduceTest, LargeOnesAreAsynchronous) {
  EXPECT_FALSE(returned_after_the_peer_called(kLarge, 1 << 20, std::chrono::seconds(60)));
}

TEST(InlineAllReduceTest, ZeroSendsEveryAllReduceThroughTheProcessGroup) {
  EXPECT_FALSE(returned_after_the_peer_called(kSmall, 0, std::chrono::seconds(60)));
}

TEST(InlineAllReduceTest, BothPathsInterleavedGiveTheSameSums) {
  with_communicators(3, [](Communicator& c) {
    const double r = static_cast<double>(c.rank());
    auto large_a = torch::full({kLarge}, r + 1);
    auto small_b = torch::full({kSmall}, r + 1, torch::kDouble);
    auto large_c = torch::full({kLarge}, 2 * r);
    auto small_d = torch::full({7}, c.rank() * 10, torch::kInt);
    auto small_e = torch::full({5}, r);
    auto a = c.all_reduce_async(large_a);
    auto b = c.all_reduce_async(small_b, ReduceOp::Max);
    auto cc = c.all_reduce_async(large_c, ReduceOp::Mean);
    auto d = c.all_reduce_async(small_d);
    auto e = c.all_reduce_async(small_e, ReduceOp::Mean);
    EXPECT_TRUE(torch::equal(e.wait(), torch::full({5}, 1.0)));
    EXPECT_TRUE(torch::equal(d.wait(), torch::full({7}, 30, torch::kInt)));
    EXPECT_TRUE(torch::equal(cc.wait(), torch::full({kLarge}, 2.0)));
    EXPECT_TRUE(torch::equal(b.wait(), torch::full({kSmall}, 3.0, torch::kDouble)));
    EXPECT_TRUE(torch::equal(a.wait(), torch::full({kLarge}, 6.0)));
    // The in-place contract holds on both paths.
    EXPECT_TRUE(torch::equal(small_d, torch::full({7}, 30, torch::kInt)));
    EXPECT_TRUE(torch::equal(large_a, torch::full({kLarge}, 6.0)));
    const auto counts = c.counters();
    EXPECT_EQ(counts[CollectiveKind::AllReduce].calls, 5);
  });
}

TEST(InlineAllReduceTest, NegativeLimitIsAConfigurationError) {
  auto options = loopback_options(0, 1, 29500);
  options.inline_all_reduce_max_bytes = -1;
  options.shared_memory = false;
  EXPECT_THROW(options.validate(), ConfigurationError);
}

}  // namespace
}  // namespace volt

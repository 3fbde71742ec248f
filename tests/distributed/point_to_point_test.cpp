// Point-to-point sends and receives (Note [Point to point]) with ranks as threads over Gloo on
// 127.0.0.1: a tensor passed along a chain of ranks and back (what pipeline stages do with
// activations and their gradients), sends matched to receives in issue order, a non-contiguous
// target filled in place, both counted (send, recv) without advancing the collective sequence, a
// receive whose send never comes failing at the timeout naming the peer, and a peer that is not
// another rank of the group refused.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "core/error.h"
#include "distributed/communicator.h"
#include "tests/distributed/thread_ranks.h"
#include "tests/support/test_support.h"

namespace volt::point_to_point_tests {
namespace {

using testing::loopback_options;
using testing::run_thread_ranks;
using testing::with_communicators;

TEST(PointToPointTest, ATensorTravelsAlongAChainOfRanksAndBack) {
  with_communicators(3, [](Communicator& c) {
    const int64_t rank = c.rank(), last = c.size() - 1;
    // Forward: rank r receives from r - 1, adds r + 1, sends to r + 1.
    auto activation = torch::zeros({2, 3});
    if (rank > 0) c.recv(activation, rank - 1);
    activation += static_cast<double>(rank + 1);
    if (rank < last) c.send(activation, rank + 1);
    if (rank == last) {
      EXPECT_TRUE(torch::equal(activation, torch::full({2, 3}, 6.0f)));
    }
    // Backward: the other way, into a non-contiguous target (a transposed view).
    auto storage = torch::zeros({3, 2});
    auto gradient = storage.t();
    ASSERT_FALSE(gradient.is_contiguous());
    if (rank == last) gradient.copy_(torch::arange(6, torch::kFloat).reshape({2, 3}));
    if (rank < last) c.recv(gradient, rank + 1);
    if (rank > 0) c.send(gradient * 2.0, rank - 1);
    const double scale = static_cast<double>(int64_t{1} << (last - rank));
    EXPECT_TRUE(torch::equal(gradient, torch::arange(6, torch::kFloat).reshape({2, 3}) * scale)) << "rank " << rank;
    const auto counters = c.counters();
    EXPECT_EQ(counters[CollectiveKind::Send].calls, (rank < last ? 1 : 0) + (rank > 0 ? 1 : 0));
    EXPECT_EQ(counters[CollectiveKind::Recv].calls, (rank > 0 ? 1 : 0) + (rank < last ? 1 : 0));
    EXPECT_EQ(counters[CollectiveKind::Send].bytes, 24 * counters[CollectiveKind::Send].calls);
    EXPECT_EQ(c.counters().as_metrics().count("comm/send_bytes"), 1u);
    // A collective after them: every rank's sequence still agrees.
    auto t = torch::ones({1});
    c.all_reduce(t);
    EXPECT_EQ(t.item<float>(), 3.0f);
  });
}

TEST(PointToPointTest, SendsAreReceivedInTheOrderTheyWereIssued) {
  with_communicators(2, [](Communicator& c) {
    if (c.rank() == 0) {
      auto first = c.send_async(torch::full({4}, 1.0f), 1);
      auto second = c.send_async(torch::full({4}, 2.0f), 1);
      first.wait();
      second.wait();
      return;
    }
    auto a = torch::zeros({4}), b = torch::zeros({4});
    auto got_a = c.recv_async(a, 0);
    auto got_b = c.recv_async(b, 0);
    got_b.wait();
    got_a.wait();
    EXPECT_TRUE(torch::equal(a, torch::full({4}, 1.0f)));
    EXPECT_TRUE(torch::equal(b, torch::full({4}, 2.0f)));
  });
}

TEST(PointToPointTest, AReceiveWhoseSendNeverComesFailsAtTheTimeoutNamingThePeer) {
  // The timeout also bounds the connections to the store: 4 s was once too short for them on the
  // 2-core CI machine busy with ctest -j2 ("cannot open the monitoring connection ... timed out").
  const auto timeout = std::chrono::milliseconds(10000);
  std::string message;
  std::atomic<bool> rank1_done{false};
  const auto errors = run_thread_ranks(2, [&](int64_t rank, int64_t port) {
    auto c = Communicator::connect(loopback_options(rank, 2, port, timeout));
    if (rank == 0) {  // alive, never sends; leaves once rank 1 has failed
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (!rank1_done && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      return;
    }
    auto t = torch::zeros({8});
    try {
      c->recv(t, 0);
    } catch (const DistributedError& e) {
      message = e.what();
    }
    rank1_done = true;
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  EXPECT_NE(message.find("rank 1 of 2"), std::string::npos) << message;
  EXPECT_NE(message.find("recv #1(from rank 0) of 32 bytes"), std::string::npos) << message;
}

TEST(PointToPointTest, APeerThatIsNotAnotherRankOfTheGroupIsRefused) {
  with_communicators(2, [](Communicator& c) {
    const auto self = testing::configuration_error_of([&] { c.send(torch::ones({1}), c.rank()); });
    EXPECT_NE(self.find("send expects another rank of the group, in [0, 2) and not " + std::to_string(c.rank())),
              std::string::npos)
        << self;
    auto t = torch::zeros({1});
    const auto outside = testing::configuration_error_of([&] { c.recv(t, 2); });
    EXPECT_NE(outside.find("recv expects another rank of the group"), std::string::npos) << outside;
  });
}

}  // namespace
}  // namespace volt::point_to_point_tests

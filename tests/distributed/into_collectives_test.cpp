// all_gather_into / reduce_scatter_into / gather against closed-form values, world sizes 2-4:
// results land in the caller's buffer (same storage), inputs stay as they were, bad buffers are
// configuration errors raised before anything is sent (their counters: communicator_test).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "core/error.h"
#include "distributed/communicator.h"
#include "tests/distributed/thread_ranks.h"

namespace volt {
namespace {

using testing::loopback_options;
using testing::run_thread_ranks;
using testing::with_communicators;

class IntoTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(IntoTest, AllGatherIntoPutsRankRAtItsOffset) {
  const int64_t n = GetParam();
  with_communicators(n, [&](Communicator& c) {
    // A 2×3 input: rank r's is 100·r + [0..6).
    const auto input = torch::arange(6, torch::kFloat).reshape({2, 3}) + 100.0 * static_cast<double>(c.rank());
    auto output = torch::full({n * 6}, -1.0f);
    const auto* storage = output.data_ptr();
    auto handle = c.all_gather_into_async(output, input);
    const auto result = handle.wait();
    EXPECT_EQ(result.data_ptr(), storage) << "rank " << c.rank() << ": the result is the caller's buffer";
    for (int64_t r = 0; r < n; ++r) {
      EXPECT_TRUE(torch::equal(output.narrow(0, 6 * r, 6), torch::arange(6, torch::kFloat) + 100.0 * static_cast<double>(r)))
          << "rank " << c.rank() << " slot " << r << ": " << output;
    }
    // Any output shape with the right number of elements; non-contiguous input.
    auto matrix = torch::zeros({n, 2}, torch::kLong);
    const auto column = torch::tensor({{c.rank()}, {-c.rank()}}, torch::kLong).t();  // 1×2, a view
    c.all_gather_into(matrix, column);
    for (int64_t r = 0; r < n; ++r) {
      EXPECT_TRUE(torch::equal(matrix[r], torch::tensor({r, -r}, torch::kLong))) << "rank " << c.rank() << " row " << r;
    }
  });
}

TEST_P(IntoTest, ReduceScatterIntoWritesThisRanksReducedChunk) {
  const int64_t n = GetParam();
  for (const int64_t numel : {int64_t{4}, int64_t{300 * 1024}}) {  // a small and a large ring
    with_communicators(n, [&](Communicator& c) {
      // input[j] = j + 1000·rank; chunk r summed over ranks: n·j + 1000·n(n-1)/2.
      const auto original = torch::arange(n * numel, torch::kDouble) + 1000.0 * static_cast<double>(c.rank());
      const auto input = original.clone();
      auto output = torch::empty({numel}, torch::kDouble);
      const auto* storage = output.data_ptr();
      const auto result = c.reduce_scatter_into_async(output, input, ReduceOp::Sum).wait();
      EXPECT_EQ(result.data_ptr(), storage);
      const auto j = torch::arange(c.rank() * numel, (c.rank() + 1) * numel, torch::kDouble);
      const double triangle = 1000.0 * static_cast<double>(n * (n - 1) / 2);
      EXPECT_TRUE(torch::equal(output, j * static_cast<double>(n) + triangle)) << "rank " << c.rank() << " numel " << numel;
      EXPECT_TRUE(torch::equal(input, original)) << "the input is not modified";
      auto mean = torch::empty({numel}, torch::kDouble);
      c.reduce_scatter_into(mean, input, ReduceOp::Mean);
      EXPECT_TRUE(torch::allclose(mean, j + triangle / static_cast<double>(n))) << "rank " << c.rank();
      auto max = torch::empty({numel}, torch::kDouble);
      c.reduce_scatter_into(max, input, ReduceOp::Max);
      EXPECT_TRUE(torch::equal(max, j + 1000.0 * static_cast<double>(n - 1))) << "rank " << c.rank();
    });
  }
}

TEST_P(IntoTest, GatherStacksOnTheRootOnly) {
  const int64_t n = GetParam();
  with_communicators(n, [&](Communicator& c) {
    for (int64_t root = 0; root < n; ++root) {
      const auto gathered = c.gather(torch::full({2, 2}, static_cast<double>(c.rank() * 10 + root)), root);
      if (c.rank() != root) {
        EXPECT_FALSE(gathered.defined()) << "rank " << c.rank();
        continue;
      }
      ASSERT_EQ(gathered.sizes(), (std::vector<int64_t>{n, 2, 2}));
      for (int64_t r = 0; r < n; ++r) {
        EXPECT_TRUE(torch::equal(gathered[r], torch::full({2, 2}, static_cast<double>(r * 10 + root))))
            << "root " << root << " slot " << r;
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, IntoTest, ::testing::Values(2, 3, 4),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

TEST_P(IntoTest, ReduceScatterIsARingThatSendsNMinusOneNthsOfTheInputAndAllGatherTheSame) {
  // Note [Ring reduce_scatter]: half an all_reduce's traffic. Counted as sent bytes.
  const int64_t n = GetParam(), numel = 3 * 1024;
  with_communicators(n, [&](Communicator& c) {
    c.reset_counters();
    auto shard = torch::empty({numel});
    c.reduce_scatter_into(shard, torch::ones({n * numel}));
    EXPECT_TRUE(torch::equal(shard, torch::full({numel}, static_cast<float>(n))));
    auto full = torch::empty({n * numel});
    c.all_gather_into(full, shard);
    const auto counters = c.counters();
    const int64_t input_bytes = n * numel * 4;
    EXPECT_EQ(counters[CollectiveKind::ReduceScatter].bytes, input_bytes) << "the payload: the whole input";
    EXPECT_EQ(counters[CollectiveKind::ReduceScatter].sent_bytes, (n - 1) * input_bytes / n) << "rank " << c.rank();
    EXPECT_EQ(counters[CollectiveKind::AllGather].sent_bytes, (n - 1) * numel * 4) << "rank " << c.rank();
    const auto metrics = counters.as_metrics();
    EXPECT_EQ(metrics.at("comm/reduce_scatter_sent_bytes"), static_cast<double>((n - 1) * input_bytes / n));
    EXPECT_EQ(metrics.count("comm/all_reduce_sent_bytes"), 0u) << "not counted where the backend picks the algorithm";
  });
}

TEST(IntoCollectivesTest, BadBuffersAreConfigurationErrorsBeforeAnythingIsSent) {
  with_communicators(2, [](Communicator& c) {
    const auto input = torch::ones({4});
    auto expect_error = [&](const std::function<void()>& call, const std::string& part) {
      try {
        call();
        ADD_FAILURE() << "no error; expected one containing: " << part;
      } catch (const ConfigurationError& e) {
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
      }
    };
    expect_error([&] { c.all_gather_into(torch::empty({7}), input); },
                 "all_gather_into expects an output of size() × input.numel() = 8 elements, got 7");
    expect_error([&] { c.all_gather_into(torch::empty({8}, torch::kDouble), input); },
                 "expects an output of the input's dtype and device");
    expect_error([&] { c.all_gather_into(torch::empty({4, 2}).t(), input); }, "expects a contiguous output");
    expect_error([&] { c.reduce_scatter_into(torch::empty({3}), input); },
                 "reduce_scatter_into expects an output of input.numel() / size() = 2 elements, got 3");
    expect_error([&] { c.reduce_scatter_into(torch::empty({2}), torch::ones({5})); },
                 "multiple of the group size 2, got 5");
    expect_error([&] { c.reduce_scatter_into(torch::empty({2}, torch::kLong), torch::ones({4}, torch::kLong), ReduceOp::Mean); },
                 "ReduceOp::Mean expects a floating-point tensor");
    expect_error([&] { c.gather(input, 2); }, "gather expects a root rank in [0, 2), got 2");
    EXPECT_EQ(c.counters().total_calls(), 0);
    c.barrier();
  });
}

}  // namespace
}  // namespace volt

// Note [bfloat16 over Gloo]: every collective takes bfloat16 CPU tensors. Data movement is exact
// for every bit pattern; reductions run natively in bfloat16 ("native", 2 bytes an element, at
// any size) on the inline Gloo context, or with the inline path off on the process group, which
// reduces bfloat16 itself from LibTorch 2.2 on and goes through float32 before ("float32", 4 bytes
// an element). Every path against hand-computed references on 2 and 3 thread ranks.
#include <gtest/gtest.h>

#include "core/compat.h"
#include "distributed/communicator.h"
#include "tests/distributed/thread_ranks.h"

namespace volt {
namespace {

using testing::loopback_options;
using testing::run_thread_ranks;

struct Bf16Case {
  int64_t world;
  bool inline_path;  // false: inline_all_reduce_max_bytes = 0, reductions on the process group
  // Whether reductions stay in bfloat16 (2 bytes an element) on this path with this LibTorch.
  bool native() const { return inline_path || compat::kGlooReducesBfloat16; }
};

class Bfloat16Test : public ::testing::TestWithParam<Bf16Case> {
 protected:
  void SetUp() override {
#if !defined(VOLT_WITH_INLINE_GLOO)
    if (GetParam().inline_path) GTEST_SKIP() << "the inline path is compiled out in this build";
#endif
  }

  // Runs `body` on every rank of a group configured for this case; fails naming the rank.
  void with_ranks(const std::function<void(Communicator&)>& body) {
    const auto [world, inline_path] = GetParam();
    const auto errors = run_thread_ranks(world, [&](int64_t rank, int64_t port) {
      auto options = loopback_options(rank, world, port);
      options.shared_memory = false;  // Gloo's paths (shared memory: shared_memory_group_test.cpp)
      if (!inline_path) options.inline_all_reduce_max_bytes = 0;
      auto c = Communicator::connect(options);
      body(*c);
    });
    for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  }
};

torch::Tensor bf16(const torch::Tensor& t) { return t.to(torch::kBFloat16); }

// Bit-for-bit equality (NaNs compare equal to themselves).
::testing::AssertionResult same_bits(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.scalar_type() != torch::kBFloat16 || b.scalar_type() != torch::kBFloat16 || a.sizes() != b.sizes()) {
    return ::testing::AssertionFailure() << a.dtype() << a.sizes() << " vs " << b.dtype() << b.sizes();
  }
  if (!torch::equal(a.contiguous().view(torch::kShort), b.contiguous().view(torch::kShort))) {
    return ::testing::AssertionFailure() << "bits differ";
  }
  return ::testing::AssertionSuccess();
}

// All 65536 bfloat16 bit patterns (NaNs with payloads, infinities, subnormals, -0), rotated by
// `shift` so that every rank's differ.
torch::Tensor every_pattern(int64_t shift) {
  return torch::arange(-32768, 32768, torch::kInt).roll(shift).to(torch::kShort).view(torch::kBFloat16);
}

TEST_P(Bfloat16Test, ReportsItsReductionPath) {
  with_ranks([&](Communicator& c) { EXPECT_EQ(c.bf16_reduction(), GetParam().native() ? "native" : "float32"); });
}

TEST_P(Bfloat16Test, AllReduceOfSmallIntegersIsExact) {
  const int64_t n = GetParam().world;
  with_ranks([&](Communicator& c) {
    // Rank r holds (r + 1)·i: every partial sum is an integer below 256, exact in bfloat16.
    const auto i = torch::arange(20, torch::kFloat);
    const double r = static_cast<double>(c.rank() + 1), ranks = static_cast<double>(n);
    auto sum = bf16(i * r);
    c.all_reduce(sum, ReduceOp::Sum);
    EXPECT_TRUE(same_bits(sum, bf16(i * (ranks * (ranks + 1) / 2)))) << "rank " << c.rank() << " " << sum;
    auto mean = bf16(i * r);
    c.all_reduce(mean, ReduceOp::Mean);
    EXPECT_TRUE(same_bits(mean, bf16(i * ((ranks + 1) / 2)))) << "rank " << c.rank() << " " << mean;
    auto max = bf16(i * r - 10.0);
    c.all_reduce(max, ReduceOp::Max);
    EXPECT_TRUE(same_bits(max, bf16((i * ranks - 10.0).maximum(i - 10.0)))) << "rank " << c.rank();
    auto min = bf16(i * r - 10.0);
    c.all_reduce(min, ReduceOp::Min);
    EXPECT_TRUE(same_bits(min, bf16((i * ranks - 10.0).minimum(i - 10.0)))) << "rank " << c.rank();
    // Non-contiguous: reduced through a contiguous copy, written back in place.
    auto base = bf16(torch::arange(6, torch::kFloat).reshape({2, 3}) * r);
    auto transposed = base.t();
    c.all_reduce(transposed);
    EXPECT_TRUE(same_bits(base, bf16(torch::arange(6, torch::kFloat).reshape({2, 3}) * (ranks * (ranks + 1) / 2))));
  });
}

TEST_P(Bfloat16Test, AllReduceOfArbitraryValuesRoundsLikeBfloat16AndAgreesAcrossRanks) {
  const int64_t n = GetParam().world;
  with_ranks([&](Communicator& c) {
    // Values in [1, 2): no cancellation, so the rounding error is bounded relative to the sum.
    auto value_of = [](int64_t rank) {
      return bf16(torch::rand({1000}, at::detail::createCPUGenerator(static_cast<uint64_t>(rank + 1))) + 1.0);
    };
    auto summed = value_of(c.rank());
    c.all_reduce(summed);
    auto exact = torch::zeros({1000}, torch::kDouble);
    for (int64_t r = 0; r < n; ++r) exact += value_of(r).to(torch::kDouble);
    if (n == 2) {
      // One addition, exact in float, rounded once: the reference is bfloat16(a + b) on both paths.
      EXPECT_TRUE(same_bits(summed, bf16(value_of(0).to(torch::kFloat) + value_of(1).to(torch::kFloat))))
          << "rank " << c.rank();
    } else {
      // Native: one rounding per addition (two here), each within half a unit in the last place.
      const auto error = (summed.to(torch::kDouble) - exact).abs() / exact;
      EXPECT_LE(error.max().item<double>(), 0.01) << "rank " << c.rank();
    }
    // Every rank ends with the same bits (gathered exactly, as data movement).
    const auto everyone = c.all_gather(summed);
    for (int64_t r = 1; r < n; ++r) EXPECT_TRUE(same_bits(everyone[r], everyone[0])) << "rank " << r << " vs 0";
  });
}

TEST_P(Bfloat16Test, LargeAllReducesAreReducedInBfloat16Too) {
  const int64_t n = GetParam().world;
  const int64_t numel = 1 << 20;  // 2 MiB of bfloat16: above the 1 MiB inline limit
  with_ranks([&](Communicator& c) {
    auto t = bf16(torch::arange(numel, torch::kInt).remainder(32).to(torch::kFloat) * static_cast<double>(c.rank() + 1));
    const auto before = c.counters();
    c.all_reduce(t);
    const auto used = (c.counters() - before)[CollectiveKind::AllReduce];
    EXPECT_EQ(used.bytes, numel * (GetParam().native() ? 2 : 4)) << "bytes handed to the wire";
    const auto expected = torch::arange(numel, torch::kInt).remainder(32).to(torch::kFloat) * static_cast<double>(n * (n + 1) / 2);
    EXPECT_TRUE(same_bits(t, bf16(expected))) << "rank " << c.rank();
  });
}

TEST_P(Bfloat16Test, DataMovementIsExactForEveryBitPattern) {
  const int64_t n = GetParam().world;
  with_ranks([&](Communicator& c) {
    const int64_t root = n - 1;
    auto t = every_pattern(c.rank());
    c.broadcast(t, root);
    EXPECT_TRUE(same_bits(t, every_pattern(root))) << "broadcast, rank " << c.rank();

    const auto gathered = c.all_gather(every_pattern(c.rank()));
    ASSERT_EQ(gathered.size(0), n);
    for (int64_t r = 0; r < n; ++r) EXPECT_TRUE(same_bits(gathered[r], every_pattern(r))) << "all_gather slot " << r;

    auto flat = torch::empty({n * 65536}, torch::kBFloat16);
    c.all_gather_into(flat, every_pattern(c.rank()));
    for (int64_t r = 0; r < n; ++r) {
      EXPECT_TRUE(same_bits(flat.narrow(0, r * 65536, 65536), every_pattern(r))) << "all_gather_into slot " << r;
    }

    const auto at_root = c.gather(every_pattern(c.rank()), root);
    if (c.rank() == root) {
      for (int64_t r = 0; r < n; ++r) EXPECT_TRUE(same_bits(at_root[r], every_pattern(r))) << "gather slot " << r;
    } else {
      EXPECT_FALSE(at_root.defined());
    }
  });
}

TEST_P(Bfloat16Test, ReduceScatterAndReduceOfSmallIntegersAreExact) {
  const int64_t n = GetParam().world;
  with_ranks([&](Communicator& c) {
    const double r = static_cast<double>(c.rank() + 1), triangle = static_cast<double>(n * (n + 1) / 2);
    // input[j] = (r + 1)·j for j < 8n; this rank's chunk j ∈ [8·rank, 8·rank + 8) sums to triangle·j.
    const auto input = bf16(torch::arange(8 * n, torch::kFloat) * r);
    const auto mine = torch::arange(8 * c.rank(), 8 * c.rank() + 8, torch::kFloat);
    EXPECT_TRUE(same_bits(c.reduce_scatter(input.reshape({n, 8})), bf16(mine * triangle).reshape({1, 8})))
        << "reduce_scatter, rank " << c.rank();
    auto output = torch::empty({8}, torch::kBFloat16);
    c.reduce_scatter_into(output, input, ReduceOp::Max);
    EXPECT_TRUE(same_bits(output, bf16(mine * static_cast<double>(n)))) << "reduce_scatter_into max, rank " << c.rank();
    EXPECT_TRUE(same_bits(input, bf16(torch::arange(8 * n, torch::kFloat) * r))) << "the input is not modified";

    auto reduced = bf16(torch::arange(8, torch::kFloat) * r);
    c.reduce(reduced, 0, ReduceOp::Sum);
    if (c.rank() == 0) {
      EXPECT_TRUE(same_bits(reduced, bf16(torch::arange(8, torch::kFloat) * triangle)));
    }
  });
}

TEST_P(Bfloat16Test, CountersCountTheBytesHandedToTheWire) {
  const int64_t per_element = GetParam().native() ? 2 : 4;
  const int64_t n = GetParam().world;
  with_ranks([&](Communicator& c) {
    auto t = torch::zeros({100}, torch::kBFloat16);
    c.all_reduce(t);
    c.reduce(t, 0);
    c.reduce_scatter(torch::zeros({n * 10}, torch::kBFloat16));
    c.broadcast(t, 0);
    c.all_gather(t);
    c.gather(t, 0);
    const auto counters = c.counters();
    EXPECT_EQ(counters[CollectiveKind::AllReduce].bytes, 100 * per_element);
    EXPECT_EQ(counters[CollectiveKind::Reduce].bytes, 100 * per_element);
    EXPECT_EQ(counters[CollectiveKind::ReduceScatter].bytes, n * 10 * 2) << "volt's ring: natively, on every path";
    EXPECT_EQ(counters[CollectiveKind::Broadcast].bytes, 200) << "data movement: always 2 bytes an element";
    EXPECT_EQ(counters[CollectiveKind::AllGather].bytes, 200);
    EXPECT_EQ(counters[CollectiveKind::Gather].bytes, 200);
  });
}

INSTANTIATE_TEST_SUITE_P(Paths, Bfloat16Test,
                         ::testing::Values(Bf16Case{2, true}, Bf16Case{3, true}, Bf16Case{2, false}, Bf16Case{3, false}),
                         [](const auto& info) {
                           return std::string(info.param.inline_path ? "Inline" : "ProcessGroup") + "_world" +
                                  std::to_string(info.param.world);
                         });

}  // namespace
}  // namespace volt

// all_gather_chunks / reduce_scatter_chunks (uneven chunks: ZeRO's buffers laid out by owner)
// against closed-form values, world sizes 2-4, with empty chunks, bfloat16 and the bytes each
// rank sends (Note [Ring all_gather in place], Note [Ring reduce_scatter]); the padded form other
// backends use gives the same results over Gloo; bad counts are configuration errors raised
// before anything is sent.
#include <gtest/gtest.h>

#include <numeric>

#include "core/error.h"
#include "distributed/communicator.h"
#include "distributed/transports/padded_chunks.h"
#include "tests/distributed/thread_ranks.h"
#include "tests/support/test_support.h"

namespace volt {
namespace {

using testing::with_communicators;

// Chunk sizes per world size: uneven, with an empty chunk where there are 3 or more ranks.
std::vector<int64_t> uneven_counts(int64_t n) {
  switch (n) {
    case 2: return {5, 300 * 1024};
    case 3: return {7, 0, 4096};
    default: return {3, 1024, 0, 9};
  }
}

int64_t offset_of(const std::vector<int64_t>& counts, int64_t rank) {
  return std::accumulate(counts.begin(), counts.begin() + rank, int64_t{0});
}

// Rank r's values: 1000·r + [0, counts[r]).
torch::Tensor values_of(const std::vector<int64_t>& counts, int64_t rank, torch::Dtype dtype) {
  return (torch::arange(counts[static_cast<size_t>(rank)], torch::kDouble) + 1000.0 * static_cast<double>(rank))
      .to(dtype);
}

// World size, and whether the rings run on the communicator's ring thread or the calling one.
struct ChunksCase {
  int64_t world;
  bool ring_thread;
};

class ChunksTest : public ::testing::TestWithParam<ChunksCase> {
 protected:
  void with_ranks(const std::function<void(Communicator&)>& body) {
    const bool ring_thread = GetParam().ring_thread;
    with_communicators(GetParam().world, [ring_thread](CommunicatorOptions& o) { o.ring_thread = ring_thread; }, body);
  }
};

TEST_P(ChunksTest, AllGatherChunksFillsEveryChunkInPlaceAndSendsAllButTheNextRanks) {
  const int64_t n = GetParam().world;
  const auto counts = uneven_counts(n);
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    with_ranks([&](Communicator& c) {
      auto flat = torch::full({total}, -1.0, dtype);
      flat.narrow(0, offset_of(counts, c.rank()), counts[static_cast<size_t>(c.rank())])
          .copy_(values_of(counts, c.rank(), dtype));
      const auto* storage = flat.data_ptr();
      c.reset_counters();
      const auto result = c.all_gather_chunks_async(flat, counts).wait();
      EXPECT_EQ(result.data_ptr(), storage) << "in place";
      for (int64_t r = 0; r < n; ++r) {
        EXPECT_TRUE(torch::equal(flat.narrow(0, offset_of(counts, r), counts[static_cast<size_t>(r)]),
                                 values_of(counts, r, dtype)))
            << "rank " << c.rank() << " chunk " << r << " " << dtype;
      }
      // A ring: every chunk but the right neighbour's leaves this rank once.
      const auto element = static_cast<int64_t>(flat.element_size());
      const auto sent = c.counters()[CollectiveKind::AllGather];
      EXPECT_EQ(sent.calls, 1);
      EXPECT_EQ(sent.bytes, counts[static_cast<size_t>(c.rank())] * element) << "payload: this rank's chunk";
      EXPECT_EQ(sent.sent_bytes, (total - counts[static_cast<size_t>((c.rank() + 1) % n)]) * element)
          << "rank " << c.rank();
    });
  }
}

TEST_P(ChunksTest, ReduceScatterChunksReducesThisRanksChunkAndSendsAllButItsOwn) {
  const int64_t n = GetParam().world;
  const auto counts = uneven_counts(n);
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  with_ranks([&](Communicator& c) {
    // input[j] = j + 1000·rank: chunk r summed over ranks is n·j + 1000·n(n-1)/2.
    const auto original = torch::arange(total, torch::kDouble) + 1000.0 * static_cast<double>(c.rank());
    const auto input = original.clone();
    const int64_t mine = counts[static_cast<size_t>(c.rank())], begin = offset_of(counts, c.rank());
    const auto j = torch::arange(begin, begin + mine, torch::kDouble);
    const double triangle = 1000.0 * static_cast<double>(n * (n - 1) / 2);
    c.reset_counters();
    auto sum = torch::full({mine}, -1.0, torch::kDouble);
    const auto* storage = sum.data_ptr();
    EXPECT_EQ(c.reduce_scatter_chunks_async(sum, input, counts, ReduceOp::Sum).wait().data_ptr(), storage);
    EXPECT_TRUE(torch::equal(sum, j * static_cast<double>(n) + triangle)) << "rank " << c.rank();
    EXPECT_TRUE(torch::equal(input, original)) << "the input is not modified";
    const auto counted = c.counters()[CollectiveKind::ReduceScatter];
    EXPECT_EQ(counted.bytes, total * 8) << "payload: the whole input";
    EXPECT_EQ(counted.sent_bytes, (total - mine) * 8) << "rank " << c.rank();
    auto mean = torch::empty({mine}, torch::kDouble);
    c.reduce_scatter_chunks(mean, input, counts, ReduceOp::Mean);
    EXPECT_TRUE(torch::allclose(mean, j + triangle / static_cast<double>(n))) << "rank " << c.rank();
    auto max = torch::empty({mine}, torch::kDouble);
    c.reduce_scatter_chunks(max, input, counts, ReduceOp::Max);
    EXPECT_TRUE(torch::equal(max, j + 1000.0 * static_cast<double>(n - 1))) << "rank " << c.rank();
    // An output that is the input's own chunk (in place) reads its part before it is overwritten.
    auto in_place = input.clone();
    auto own = in_place.narrow(0, begin, mine);
    c.reduce_scatter_chunks(own, in_place, counts, ReduceOp::Sum);
    EXPECT_TRUE(torch::equal(own, j * static_cast<double>(n) + triangle)) << "rank " << c.rank() << " in place";
  });
}

TEST_P(ChunksTest, EqualCountsGiveReduceScatterIntosBits) {
  // The same ring serves reduce_scatter_into (FSDP's bit-for-bit tests rest on it): float32 sums
  // of random values in the same order.
  const int64_t n = GetParam().world, m = 1000;
  with_ranks([&](Communicator& c) {
    torch::manual_seed(7 + c.rank());
    const auto input = torch::randn({n * m});
    auto into = torch::empty({m}), chunks = torch::empty({m});
    c.reduce_scatter_into(into, input);
    c.reduce_scatter_chunks(chunks, input, std::vector<int64_t>(static_cast<size_t>(n), m));
    EXPECT_TRUE(torch::equal(into, chunks)) << "rank " << c.rank();
  });
}

TEST_P(ChunksTest, ThePaddedFormOfOtherBackendsGivesTheSameResults) {
  const int64_t n = GetParam().world;
  // Uneven chunks (padded), and equal ones (handed to the equal-chunk collectives as they are).
  for (const auto& counts : {uneven_counts(n), std::vector<int64_t>(static_cast<size_t>(n), 1000)}) {
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  with_ranks([&](Communicator& c) {
    torch::manual_seed(11 + c.rank());
    const auto input = torch::randn({total});
    const int64_t mine = counts[static_cast<size_t>(c.rank())];
    auto ring = torch::empty({mine}), padded = torch::empty({mine});
    c.reduce_scatter_chunks(ring, input, counts);
    reduce_scatter_chunks_by_padding(c, padded, input, counts, ReduceOp::Sum);
    EXPECT_TRUE(torch::allclose(ring, padded, 1e-6, 1e-6)) << "rank " << c.rank();
    auto gathered = input.clone(), gathered_padded = input.clone();
    c.all_gather_chunks(gathered, counts);
    all_gather_chunks_by_padding(c, gathered_padded, counts);
    EXPECT_TRUE(torch::equal(gathered, gathered_padded)) << "rank " << c.rank();
  });
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ChunksTest,
                         ::testing::Values(ChunksCase{2, true}, ChunksCase{3, true}, ChunksCase{4, true},
                                           ChunksCase{2, false}, ChunksCase{3, false}, ChunksCase{4, false}),
                         [](const auto& info) {
                           return "world" + std::to_string(info.param.world) +
                                  (info.param.ring_thread ? "_ring_thread" : "_calling_thread");
                         });

TEST(ChunkCollectivesTest, BadCountsAreConfigurationErrorsBeforeAnythingIsSent) {
  with_communicators(2, [](Communicator& c) {
    auto expect_error = [&](const std::function<void()>& call, const std::string& part) {
      const auto message = testing::configuration_error_of(call);
      EXPECT_NE(message.find(part), std::string::npos) << message;
    };
    auto flat = torch::ones({6});
    expect_error([&] { c.all_gather_chunks(flat, {6}); }, "all_gather_chunks expects one count per rank (2), got 1");
    expect_error([&] { c.all_gather_chunks(flat, {7, -1}); }, "expects counts >= 0, got -1");
    expect_error([&] { c.all_gather_chunks(flat, {2, 3}); }, "expects counts summing to the tensor's 6 elements, got 5");
    expect_error([&] { c.all_gather_chunks(torch::ones({3, 2}).t(), {3, 3}); }, "expects a contiguous tensor");
    expect_error([&] { c.reduce_scatter_chunks(torch::empty({3}), flat, {4, 2}); },
                 "reduce_scatter_chunks expects an output of counts[rank()] = " + std::to_string(c.rank() == 0 ? 4 : 2) +
                     " elements, got 3");
    EXPECT_EQ(c.counters().total_calls(), 0);
    c.barrier();
  });
}

}  // namespace
}  // namespace volt

// Variable-size state between ranks: bytes gathered by rank (sizes differing per rank, empty ones
// included), StateDicts as bytes and back bit for bit, and per-rank StateDicts gathered on a root.
#include <gtest/gtest.h>

#include <cstring>

#include "checkpoint/state_dict_bytes.h"
#include "core/error.h"
#include "distributed/state_gather.h"
#include "tests/distributed/thread_ranks.h"

namespace volt {
namespace {

using testing::with_communicators;

// Rank r's bytes: 37·r of them (rank 0 none), every value 0-255 including '\0', rank-specific.
std::string bytes_of(int64_t rank) {
  std::string bytes(static_cast<size_t>(37 * rank), '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 7 + static_cast<size_t>(rank) * 31) % 256);
  return bytes;
}

// Same dtype, shape, strides, device and bytes (NaN payloads included).
::testing::AssertionResult same_bits(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes() || a.strides() != b.strides() ||
      a.device() != b.device()) {
    return ::testing::AssertionFailure() << a.dtype() << a.sizes() << a.strides() << " vs " << b.dtype() << b.sizes()
                                         << b.strides();
  }
  const auto x = a.contiguous(), y = b.contiguous();
  const auto bytes = static_cast<size_t>(x.numel()) * x.element_size();
  if (std::memcmp(x.data_ptr(), y.data_ptr(), bytes) != 0) return ::testing::AssertionFailure() << "bytes differ";
  return ::testing::AssertionSuccess();
}

// A state with every kind of value a strategy keeps, tensors of awkward dtypes and layouts.
StateDict sample_state(int64_t rank) {
  auto generator = at::detail::createCPUGenerator(static_cast<uint64_t>(10 + rank));
  StateDict state;
  state.set("rank", rank);
  state.set("scale", 0.1 * static_cast<double>(rank + 1));
  state.set("enabled", rank % 2 == 0);
  state.set("name", std::string("rank-") + std::to_string(rank));
  state.set("steps", std::vector<int64_t>{rank, 2 * rank, 3});
  state.set("error", torch::randn({static_cast<int64_t>(rank + 1), 3}, generator));  // size differs per rank
  // Every bfloat16 bit pattern, NaNs with payloads included.
  state.set("bf16_bits", torch::arange(-32768, 32768, torch::kInt).to(torch::kShort).view(torch::kBFloat16));
  state.set("half", torch::randn({5}, generator).to(torch::kHalf));
  state.set("transposed", torch::arange(12, torch::kDouble).reshape({3, 4}).t());
  state.set("flags", torch::tensor({true, false, true}));
  StateDict nested;
  nested.set("momentum", torch::full({2}, static_cast<double>(rank), torch::kLong));
  nested.set("empty", torch::empty({0}));
  state.set("nested", nested);
  return state;
}

void expect_same_state(const StateDict& got, const StateDict& expected, const std::string& who) {
  ASSERT_EQ(got.keys(), expected.keys()) << who;
  EXPECT_EQ(got.get_int("rank"), expected.get_int("rank")) << who;
  EXPECT_EQ(got.get_double("scale"), expected.get_double("scale")) << who;
  EXPECT_EQ(got.get_bool("enabled"), expected.get_bool("enabled")) << who;
  EXPECT_EQ(got.get_string("name"), expected.get_string("name")) << who;
  EXPECT_EQ(got.get_ints("steps"), expected.get_ints("steps")) << who;
  for (const char* key : {"error", "bf16_bits", "half", "transposed", "flags"}) {
    EXPECT_TRUE(same_bits(got.get_tensor(key), expected.get_tensor(key))) << who << " " << key;
  }
  for (const char* key : {"momentum", "empty"}) {
    EXPECT_TRUE(same_bits(got.child("nested").get_tensor(key), expected.child("nested").get_tensor(key)))
        << who << " nested." << key;
  }
}

TEST(StateDictBytesTest, RoundTripIsExact) {
  const auto state = sample_state(3);
  const auto bytes = state_dict_to_bytes(state);
  expect_same_state(state_dict_from_bytes(bytes), state, "round trip");
  EXPECT_EQ(state_dict_to_bytes(state_dict_from_bytes(bytes)), bytes) << "bytes are stable";
  EXPECT_TRUE(state_dict_from_bytes(state_dict_to_bytes(StateDict())).empty());
}

TEST(StateDictBytesTest, BytesThatAreNotAStateDictAreACheckpointError) {
  try {
    state_dict_from_bytes("not a pickle", "state of rank 2");
    FAIL() << "no error";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("state of rank 2: expected the bytes of a pickled state dict, got 12 bytes"),
              std::string::npos)
        << e.what();
  }
  c10::impl::GenericList list(c10::AnyType::get());
  list.push_back(1);
  const auto bytes = torch::pickle_save(list);
  EXPECT_THROW(state_dict_from_bytes(std::string(bytes.begin(), bytes.end())), CheckpointError);
}

class BytesTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(BytesTest, AllGatherBytesGivesEveryRankEveryRanksBytes) {
  const int64_t n = GetParam();
  with_communicators(n, [&](Communicator& c) {
    const auto gathered = c.all_gather_bytes(bytes_of(c.rank()));
    ASSERT_EQ(gathered.size(), static_cast<size_t>(n)) << "rank " << c.rank();
    for (int64_t r = 0; r < n; ++r) EXPECT_EQ(gathered[static_cast<size_t>(r)], bytes_of(r)) << "rank " << c.rank() << " slot " << r;
    // Nothing at all on any rank: one collective for the sizes, none for the bytes.
    const auto before = c.counters();
    const auto empty = c.all_gather_bytes("");
    EXPECT_EQ(empty, std::vector<std::string>(static_cast<size_t>(n))) << "rank " << c.rank();
    EXPECT_EQ((c.counters() - before).total_calls(), 1);
  });
}

TEST_P(BytesTest, GatherBytesLandsOnTheRootOnly) {
  const int64_t n = GetParam();
  with_communicators(n, [&](Communicator& c) {
    const int64_t root = n - 1;
    const auto before = c.counters();
    const auto gathered = c.gather_bytes(bytes_of(c.rank()), root);
    const auto used = c.counters() - before;
    EXPECT_EQ(used[CollectiveKind::AllGather].calls, 1) << "the sizes";
    EXPECT_EQ(used[CollectiveKind::Gather].calls, 1) << "the bytes";
    EXPECT_EQ(used[CollectiveKind::Gather].bytes, 37 * (n - 1)) << "padded to the longest";
    if (c.rank() != root) {
      EXPECT_TRUE(gathered.empty()) << "rank " << c.rank();
      return;
    }
    ASSERT_EQ(gathered.size(), static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) EXPECT_EQ(gathered[static_cast<size_t>(r)], bytes_of(r)) << "slot " << r;
  });
}

TEST_P(BytesTest, GatherStateDictsGivesTheRootEveryRanksStateExactly) {
  const int64_t n = GetParam();
  with_communicators(n, [&](Communicator& c) {
    const auto states = gather_state_dicts(c, sample_state(c.rank()), 0);
    if (c.rank() != 0) {
      EXPECT_TRUE(states.empty()) << "rank " << c.rank();
      return;
    }
    ASSERT_EQ(states.size(), static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) expect_same_state(states[static_cast<size_t>(r)], sample_state(r), "rank " + std::to_string(r));
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, BytesTest, ::testing::Values(2, 3, 4),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

TEST(StateGatherTest, BadRootIsAConfigurationErrorOnEveryRankBeforeAnyCollective) {
  with_communicators(2, [](Communicator& c) {
    EXPECT_THROW(c.gather_bytes("x", 2), ConfigurationError);
    EXPECT_THROW(gather_state_dicts(c, StateDict(), -1), ConfigurationError);
    EXPECT_EQ(c.counters().total_calls(), 0);
    c.barrier();
  });
}

}  // namespace
}  // namespace volt

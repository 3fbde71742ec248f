// Note [Per-rank entries]: a list written by N ranks gives each of N ranks its own entry, and
// nothing at another world size (the caller then warns); a value that is not a list is a
// CheckpointError naming the key.
#include <gtest/gtest.h>

#include "checkpoint/per_rank_entries.h"
#include "core/error.h"

namespace volt {
namespace {

StateDict entry_of(int64_t rank) {
  StateDict state;
  state.set("rank", torch::full({2}, static_cast<double>(rank), torch::kDouble));
  return state;
}

TEST(PerRankEntries, EachRankTakesItsOwnEntryAtTheSameWorldSize) {
  StateDict section;
  section.set("things_per_rank", state_dict_list({entry_of(0), entry_of(1), entry_of(2)}));
  for (int64_t rank = 0; rank < 3; ++rank) {
    const auto found = per_rank_entry(section, "things_per_rank", rank, 3, "test");
    EXPECT_EQ(found.saved_ranks, 3);
    ASSERT_TRUE(found.entry.has_value()) << "rank " << rank;
    EXPECT_TRUE(torch::equal(found.entry->get_tensor("rank"), entry_of(rank).get_tensor("rank"))) << "rank " << rank;
  }
}

TEST(PerRankEntries, AnotherWorldSizeTakesNoEntryAndSaysHowManyWroteIt) {
  StateDict section;
  section.set("things_per_rank", state_dict_list({entry_of(0), entry_of(1)}));
  for (const int64_t world : {1, 3}) {
    const auto found = per_rank_entry(section, "things_per_rank", 0, world, "test");
    EXPECT_FALSE(found.entry.has_value()) << world << " ranks";
    EXPECT_EQ(found.saved_ranks, 2);
  }
}

TEST(PerRankEntries, AValueThatIsNotAListIsACheckpointErrorNamingTheKey) {
  StateDict section;
  section.set("things_per_rank", entry_of(0));
  try {
    per_rank_entry(section, "things_per_rank", 0, 1, "the checkpoint 'x.ckpt'");
    FAIL() << "expected a CheckpointError";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("the checkpoint 'x.ckpt': 'things_per_rank' is not a list"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace volt

// The named process mesh (Note [Process mesh]) with ranks as threads over Gloo on 127.0.0.1:
// coordinates row-major with the last dimension innermost, each dimension's group the ranks that
// share every other coordinate (checked by what an all_reduce over it sums), a dimension of the
// whole world reusing the world, and bad input refused on every rank with the fix named.
#include <gtest/gtest.h>

#include "core/error.h"
#include "distributed/process_mesh.h"
#include "tests/distributed/thread_ranks.h"
#include "tests/support/test_support.h"

namespace volt::process_mesh_tests {
namespace {

using testing::loopback_options;
using testing::run_thread_ranks;

void expect_no_errors(const std::vector<std::string>& errors) {
  for (size_t rank = 0; rank < errors.size(); ++rank) EXPECT_EQ(errors[rank], "") << "rank " << rank;
}

// The sum of 2^rank over `group`: which world ranks it holds, as bits.
int64_t members_of(Communicator& group, int64_t world_rank) {
  auto t = torch::tensor({static_cast<double>(int64_t{1} << world_rank)}, torch::kDouble);
  group.all_reduce(t);
  return static_cast<int64_t>(t.item<double>());
}

int64_t bits(const std::vector<int64_t>& ranks) {
  int64_t out = 0;
  for (const auto r : ranks) out |= int64_t{1} << r;
  return out;
}

TEST(ProcessMeshTest, EightRanksAsPipelineDataAndTensorParallel) {
  expect_no_errors(run_thread_ranks(8, [](int64_t rank, int64_t port) {
    auto world = Communicator::connect(loopback_options(rank, 8, port));
    auto mesh = ProcessMesh::build(world, parse_mesh_dimensions("pp=2,dp=2,tp=2"));
    // Row-major, tp innermost: rank = 4 pp + 2 dp + tp.
    EXPECT_EQ(mesh->coordinate("pp"), rank / 4);
    EXPECT_EQ(mesh->coordinate("dp"), rank / 2 % 2);
    EXPECT_EQ(mesh->coordinate("tp"), rank % 2);
    EXPECT_EQ(mesh->size("dp"), 2);
    EXPECT_EQ(mesh->rank_at({mesh->coordinate("pp"), mesh->coordinate("dp"), mesh->coordinate("tp")}), rank);
    const auto tp = mesh->group_ranks("tp"), dp = mesh->group_ranks("dp"), pp = mesh->group_ranks("pp");
    const int64_t base = rank - rank % 2;
    EXPECT_EQ(tp, (std::vector<int64_t>{base, base + 1})) << "tp: consecutive ranks";
    EXPECT_EQ(dp, (std::vector<int64_t>{rank / 4 * 4 + rank % 2, rank / 4 * 4 + rank % 2 + 2}));
    EXPECT_EQ(pp, (std::vector<int64_t>{rank % 4, rank % 4 + 4}));
    for (const auto& [name, ranks] : {std::pair{"tp", tp}, std::pair{"dp", dp}, std::pair{"pp", pp}}) {
      auto& group = mesh->group(name);
      EXPECT_EQ(group.size(), 2) << name;
      EXPECT_EQ(group.rank(), mesh->coordinate(name)) << name << ": the group's rank is the coordinate";
      EXPECT_EQ(group.global_ranks(), ranks) << name;
      EXPECT_EQ(members_of(group, rank), bits(ranks)) << name << ", rank " << rank;
    }
    EXPECT_EQ(mesh->describe(), "pp=2,dp=2,tp=2 (rank " + std::to_string(rank) + ": pp " + std::to_string(rank / 4) +
                                    ", dp " + std::to_string(rank / 2 % 2) + ", tp " + std::to_string(rank % 2) + ")");
  }));
}

TEST(ProcessMeshTest, AWholeWorldDimensionIsTheWorldAndASizeOneDimensionEachRankAlone) {
  expect_no_errors(run_thread_ranks(4, [](int64_t rank, int64_t port) {
    auto world = Communicator::connect(loopback_options(rank, 4, port));
    auto mesh = ProcessMesh::build(world, parse_mesh_dimensions("pp=1,dp=4"));
    EXPECT_EQ(&mesh->group("dp"), world.get()) << "no second group of the same ranks";
    EXPECT_EQ(mesh->group("pp").size(), 1);
    EXPECT_EQ(members_of(mesh->group("pp"), rank), int64_t{1} << rank);
    EXPECT_EQ(members_of(mesh->group("dp"), rank), 15);
    EXPECT_TRUE(mesh->has("pp"));
    EXPECT_FALSE(mesh->has("tp"));
    const auto missing = testing::configuration_error_of([&] { mesh->group("tp"); });
    EXPECT_NE(missing.find("no dimension 'tp' in pp=1,dp=4"), std::string::npos) << missing;
  }));
}

TEST(ProcessMeshTest, SizesThatDoNotMultiplyToTheWorldAreRefusedOnEveryRankBeforeAnyGroup) {
  expect_no_errors(run_thread_ranks(4, [](int64_t rank, int64_t port) {
    auto world = Communicator::connect(loopback_options(rank, 4, port));
    const auto message = testing::configuration_error_of([&] { ProcessMesh::build(world, {{"dp", 3}, {"tp", 2}}); });
    EXPECT_NE(message.find("dp=3,tp=2 holds 6 ranks, but the world has 4; choose sizes whose product is 4"),
              std::string::npos)
        << message;
    auto t = torch::ones({1});
    world->all_reduce(t);
    EXPECT_EQ(t.item<float>(), 4.0f) << "the refusal communicated nothing (rank " << rank << ")";
  }));
}

TEST(ProcessMeshDimensions, ParsedInOrderAndBadTextRefusedWithTheFix) {
  const auto dims = parse_mesh_dimensions("pp=2,dp=3,tp=1");
  ASSERT_EQ(dims.size(), 3u);
  EXPECT_EQ(dims[1].name, "dp");
  EXPECT_EQ(dims[1].size, 3);
  EXPECT_EQ(to_string(dims), "pp=2,dp=3,tp=1");
  const std::vector<std::pair<std::string, std::string>> bad{
      {"dp", "is not name=size; write the dimensions as pp=2,dp=2,tp=2"},
      {"dp=two", "the size of 'dp' in 'dp=two' is 'two', not a whole number"},
      {"dp=2x", "is '2x', not a whole number"},
      {"dp=0", "dimension 'dp' has size 0; sizes are whole numbers >= 1"},
      {"dp=2,dp=2", "dimension 'dp' is named twice in dp=2,dp=2; name each once"},
      {"DP=2", "'DP' is not a dimension name"},
      {"=2", "'' is not a dimension name"},
      {"", "no dimensions; name at least one"}};
  for (const auto& [text, expected] : bad) {
    const auto message = testing::configuration_error_of([&] { parse_mesh_dimensions(text); });
    EXPECT_NE(message.find(expected), std::string::npos) << "'" << text << "': " << message;
  }
}

}  // namespace
}  // namespace volt::process_mesh_tests

// The model averagers on 4 ranks as threads: the mean is exact (divide, then sum) and lands in the
// parameters' own storage; the periodic averager averages at warmup, warmup + period, ... over the
// world and nowhere else; the hierarchical averager follows a hand-computed schedule (which group
// averages at which step) and sends each level's bytes over that level's group only; levels and
// periods are checked with clear errors; the step is a checkpoint state.
#include <gtest/gtest.h>

#include "core/error.h"
#include "strategies/averaging/hierarchical_model_averager.h"
#include "strategies/averaging/parameter_mean.h"
#include "strategies/averaging/periodic_model_averager.h"
#include "tests/distributed/thread_ranks.h"
#include "tests/support/test_support.h"

namespace volt::averaging::averager_tests {
namespace {

using testing::loopback_options;
using testing::run_thread_ranks;

constexpr int64_t kRanks = 4;

void expect_no_errors(const std::vector<std::string>& errors) {
  for (size_t rank = 0; rank < errors.size(); ++rank) EXPECT_EQ(errors[rank], "") << "rank " << rank;
}

ProcessTopology one_node(int64_t rank) {
  return {.global_rank = rank, .world_size = kRanks, .local_rank = rank, .local_world_size = kRanks};
}

// Parameters that differ per rank and per step, in two dtypes; integers, so every mean of them
// over 1, 2 or 4 ranks is exact in floating point whatever the order of the sums.
std::vector<torch::Tensor> parameters_of(int64_t rank, int64_t step) {
  const double base = static_cast<double>(8 * rank + 100 * step);
  return {torch::arange(6, torch::kFloat).reshape({2, 3}).add(base), torch::full({4}, base, torch::kDouble)};
}

// The mean of parameters_of over the ranks in [first, first + size).
std::vector<torch::Tensor> mean_over(int64_t first, int64_t size, int64_t step) {
  auto mean = parameters_of(first, step);
  for (int64_t r = first + 1; r < first + size; ++r) {
    const auto other = parameters_of(r, step);
    for (size_t i = 0; i < mean.size(); ++i) mean[i] = mean[i] + other[i];
  }
  for (auto& m : mean) m = m / static_cast<double>(size);
  return mean;
}

TEST(ParameterMean, IsTheExactMeanInThePlaceOfTheParameters) {
  expect_no_errors(run_thread_ranks(kRanks, [](int64_t rank, int64_t port) {
    auto world = Communicator::connect(loopback_options(rank, kRanks, port));
    auto params = parameters_of(rank, 0);
    const auto storage = params[0].data_ptr();
    replace_by_mean(params, *world);
    const auto expected = mean_over(0, kRanks, 0);
    EXPECT_TRUE(torch::equal(params[0], expected[0])) << params[0];
    EXPECT_TRUE(torch::equal(params[1], expected[1])) << params[1];
    EXPECT_EQ(params[0].data_ptr(), storage) << "the optimizer's tensors must stay the parameters";
    EXPECT_EQ(world->counters()[CollectiveKind::AllReduce].calls, 1 + 1) << "one all_reduce per dtype";
  }));
}

TEST(PeriodicModelAverager, AveragesAtTheWarmupAndEveryPeriodAfter) {
  expect_no_errors(run_thread_ranks(kRanks, [](int64_t rank, int64_t port) {
    auto world = Communicator::connect(loopback_options(rank, kRanks, port));
    PeriodicModelAverager schedule(*world, 3, 4);
    std::vector<int64_t> steps;
    for (int64_t s = 0; s < 14; ++s) {
      if (schedule.averages_at(s)) steps.push_back(s);
    }
    EXPECT_EQ(steps, (std::vector<int64_t>{4, 7, 10, 13}));

    PeriodicModelAverager averager(*world, 2, 3);
    for (int64_t step = 0; step < 8; ++step) {
      auto params = parameters_of(rank, step);
      averager.average_parameters(params);
      const bool averaged = step == 3 || step == 5 || step == 7;
      const auto expected = averaged ? mean_over(0, kRanks, step) : parameters_of(rank, step);
      EXPECT_TRUE(torch::equal(params[0], expected[0])) << "rank " << rank << ", step " << step;
      EXPECT_EQ(averager.past_warmup(), step >= 3) << "step " << step;
    }
    EXPECT_EQ(averager.step(), 8);
    EXPECT_EQ(world->counters()[CollectiveKind::AllReduce].calls, 3 * 2) << "3 averages, 2 dtypes";
  }));
}

TEST(HierarchicalModelAverager, FollowsTheHandComputedSchedule) {
  // Levels 2:2 and 4:4 (world), warm-up 3. Step s >= 3 averages at the largest period dividing s
  // (PyTorch's s % period): 4 → world, 6 → pairs, 8 → world, 10 → pairs, 12 → world; 3, 5, 7, 9,
  // 11 → none; 0-2 → none (warm-up).
  const std::vector<int64_t> expected_level = {-1, -1, -1, -1, 1, -1, 0, -1, 1, -1, 0, -1, 1};
  expect_no_errors(run_thread_ranks(kRanks, [&](int64_t rank, int64_t port) {
    auto world = Communicator::connect(loopback_options(rank, kRanks, port));
    auto topology = Topology::build(world, one_node(rank));
    HierarchicalModelAverager averager(*topology, {{2, 2}, {4, 4}}, 3);
    Communicator& pairs = topology->consecutive_group(2);
    for (int64_t step = 0; step < static_cast<int64_t>(expected_level.size()); ++step) {
      EXPECT_EQ(averager.level_at(step), expected_level[static_cast<size_t>(step)]) << "step " << step;
      auto params = parameters_of(rank, step);
      const auto world_before = world->counters().total_bytes();
      const auto pairs_before = pairs.counters().total_bytes();
      averager.average_parameters(params);
      const int64_t level = expected_level[static_cast<size_t>(step)];
      const auto expected = level == 1   ? mean_over(0, 4, step)
                            : level == 0 ? mean_over(rank / 2 * 2, 2, step)
                                         : parameters_of(rank, step);
      EXPECT_TRUE(torch::equal(params[0], expected[0]) && torch::equal(params[1], expected[1]))
          << "rank " << rank << ", step " << step << ": " << params[0];
      // 6 floats + 4 doubles = 56 bytes, over the level's group only.
      EXPECT_EQ(world->counters().total_bytes() - world_before, level == 1 ? 56 : 0) << "step " << step;
      EXPECT_EQ(pairs.counters().total_bytes() - pairs_before, level == 0 ? 56 : 0) << "step " << step;
    }
  }));
}

TEST(HierarchicalModelAverager, LevelsParseAndAreChecked) {
  EXPECT_EQ(parse_averaging_levels("2:4,8:8"), (std::vector<AveragingLevel>{{2, 4}, {8, 8}}));
  EXPECT_EQ(format_averaging_levels({{2, 4}, {8, 8}}), "2:4,8:8");
  EXPECT_NE(testing::configuration_error_of([] { parse_averaging_levels("2-4"); }).find("period:group_size"),
            std::string::npos);
  EXPECT_NE(testing::configuration_error_of([] { parse_averaging_levels("2:x"); }).find("'2:x'"), std::string::npos);
  auto message = testing::configuration_error_of([] { check_averaging_levels({{4, 2}, {2, 4}}); });
  EXPECT_NE(message.find("expected increasing periods"), std::string::npos) << message;
  message = testing::configuration_error_of([] { check_averaging_levels({{2, 0}, {4, 4}}); });
  EXPECT_NE(message.find("expected group sizes >= 1, got 0"), std::string::npos) << message;
  message = testing::configuration_error_of([] { check_averaging_levels({{2, 3}, {4, 4}}); });
  EXPECT_NE(message.find("expected each group size to divide the next"), std::string::npos) << message;
  message = testing::configuration_error_of([] { check_averaging_levels({{2, 2}, {4, 4}}, 8); });
  EXPECT_NE(message.find("expected the last group size to be the world size 8"), std::string::npos) << message;
  message = testing::configuration_error_of([] { check_averaging_levels({{2, 2}, {4, 4}}, 6); });
  EXPECT_NE(message.find("expected group sizes that divide the world size 6, got 4"), std::string::npos) << message;
  check_averaging_levels({{1, 1}, {2, 2}, {8, 8}}, 8);
}

TEST(ModelAverager, TheStepIsItsCheckpointState) {
  expect_no_errors(run_thread_ranks(2, [](int64_t rank, int64_t port) {
    auto world = Communicator::connect(loopback_options(rank, 2, port));
    PeriodicModelAverager first(*world, 2, 1), resumed(*world, 2, 1);
    auto params = parameters_of(rank, 0);
    for (int i = 0; i < 5; ++i) first.average_parameters(params);
    resumed.load_state_dict(first.state_dict());
    EXPECT_EQ(resumed.step(), 5);
    EXPECT_TRUE(resumed.past_warmup());
    StateDict bad;
    bad.set("step", int64_t{-1});
    EXPECT_THROW(resumed.load_state_dict(bad), CheckpointError);
    EXPECT_THROW(PeriodicModelAverager(*world, 0, 1), ConfigurationError);
    EXPECT_THROW(PeriodicModelAverager(*world, 2, -1), ConfigurationError);
  }));
}

}  // namespace
}  // namespace volt::averaging::averager_tests

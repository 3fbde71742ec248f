// Issue 34.5: FSDP's refusals, each a ConfigurationError that says what to do instead of training
// wrongly: a unit's parameters split over param groups (one flat shard has one set of options) or
// over optimizers (two would step the same shard), an optimizer that already stepped (its state is
// over the original parameters, not the shards), and a unit whose parameters have two dtypes (one
// flat tensor). Frozen parameters are not refused: they stay out of the units (fsdp_units.cpp) and
// are stepped as they are.
#include <gtest/gtest.h>

#include "core/error.h"
#include "strategies/fsdp/shard_param_groups.h"
#include "tests/distributed/thread_ranks.h"
#include "tests/support/test_support.h"

namespace volt::fsdp {
namespace {

using testing::with_communicators;

std::vector<std::pair<std::string, torch::Tensor>> named(torch::nn::Linear& linear) {
  std::vector<std::pair<std::string, torch::Tensor>> parameters;
  for (const auto& item : linear->named_parameters()) parameters.emplace_back(item.key(), item.value());
  return parameters;
}

TEST(FSDPRefusals, AUnitSplitOverParamGroupsOrOptimizersAndAnOptimizerWithState) {
  with_communicators(1, [&](Communicator& c) {
    torch::nn::Linear linear(3, 2);
    ReduceScatterBucket bucket(c, 0);
    const std::vector<std::shared_ptr<FullyShardedUnit>> units{std::make_shared<FullyShardedUnit>(
        "fc", std::make_unique<FlatParameter>(named(linear), c, torch::kFloat), UnitSettings{}, bucket)};
    using torch::optim::OptimizerParamGroup;
    const auto two_groups = std::make_shared<torch::optim::SGD>(
        std::vector<OptimizerParamGroup>{OptimizerParamGroup({linear->weight}), OptimizerParamGroup({linear->bias})},
        torch::optim::SGDOptions(0.1));
    const auto split = testing::configuration_error_of([&] { replace_parameters_by_shards({two_groups}, units); });
    EXPECT_NE(split.find("holds 1 of the 2 parameters of"), std::string::npos) << split;
    EXPECT_NE(split.find("must all be in one param group"), std::string::npos) << split;

    const auto first = std::make_shared<torch::optim::SGD>(linear->parameters(), torch::optim::SGDOptions(0.1));
    const auto second = std::make_shared<torch::optim::SGD>(linear->parameters(), torch::optim::SGDOptions(0.1));
    const auto twice = testing::configuration_error_of([&] { replace_parameters_by_shards({first, second}, units); });
    EXPECT_NE(twice.find("each parameter may be stepped by one optimizer only"), std::string::npos) << twice;

    const auto stepped =
        std::make_shared<torch::optim::SGD>(linear->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    for (auto& p : linear->parameters()) p.mutable_grad() = torch::ones_like(p);
    stepped->step();
    const auto with_state = testing::configuration_error_of([&] { replace_parameters_by_shards({stepped}, units); });
    EXPECT_NE(with_state.find("already has state; build optimizers in configure_optimizers"), std::string::npos)
        << with_state;
  });
}

TEST(FSDPRefusals, AUnitOfTwoDtypesInTheFlatLayout) {
  with_communicators(1, [&](Communicator& c) {
    torch::nn::Linear linear(3, 2);
    linear->bias.set_data(linear->bias.detach().to(torch::kDouble));
    const auto mixed = testing::configuration_error_of([&] { FlatParameter flat(named(linear), c, torch::kFloat); });
    EXPECT_NE(mixed.find("the parameters of one unit must share a dtype in the flat layout"), std::string::npos)
        << mixed;
    EXPECT_NE(mixed.find("Use layout=per_parameter"), std::string::npos) << mixed;
    EXPECT_NO_THROW(FlatParameter(named(linear), c, std::nullopt, nullptr, 0, false, ShardLayout::PerParameter))
        << "the per-parameter layout takes them";
  });
}

}  // namespace
}  // namespace volt::fsdp

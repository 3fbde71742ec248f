// The FlatParameter and a unit's lifecycle on ranks as threads: each rank keeps 1/N of a unit's
// parameters (padded), nothing gathered at rest; a gathered unit computes with the full values;
// gradients reduce-scatter to the mean over ranks of the shard; the lifecycle refuses calls out of
// order with a StateError that names the unit and its state; a prefetch gathers in the
// background, by the order the first forward recorded.
#include <gtest/gtest.h>

#include "core/error.h"
#include "distributed/collective_counters.h"
#include "strategies/fsdp/fully_sharded_module.h"
#include "tests/distributed/thread_ranks.h"

namespace volt::fsdp {
namespace {

using testing::with_communicators;

// Linear(3, 2) has 8 elements: padded to 9 on 3 ranks (3 each), 8 on 2 ranks (4 each). The same
// values on every rank (ranks are threads here: no shared random generator).
torch::nn::Linear same_linear() {
  torch::nn::Linear linear(3, 2);
  torch::NoGradGuard no_grad;
  linear->weight.copy_(torch::arange(6, torch::kFloat).reshape({2, 3}) * 0.25 - 0.5);
  linear->bias.copy_(torch::tensor({0.125f, -0.375f}));
  return linear;
}

std::unique_ptr<FlatParameter> flatten(torch::nn::Linear& linear, Communicator& c) {
  std::vector<std::pair<std::string, torch::Tensor>> parameters;
  for (const auto& item : linear->named_parameters()) parameters.emplace_back(item.key(), item.value());
  return std::make_unique<FlatParameter>(std::move(parameters), c, torch::kFloat);
}

// A copy of the Linear's weight and bias, flattened in the unit's order.
torch::Tensor values_of(torch::nn::Linear& linear) {
  return torch::cat({linear->weight.detach().flatten(), linear->bias.detach().flatten()}).clone();
}

class FlatParameterTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(FlatParameterTest, EachRankKeepsItsPaddedShareAndNothingGatheredAtRest) {
  const int64_t n = GetParam();
  with_communicators(n, [&](Communicator& c) {
    auto linear = same_linear();
    const auto full = values_of(linear);
    auto flat = flatten(linear, c);
    EXPECT_TRUE(flat->gathered()) << "as constructed";
    flat->release();
    const int64_t share = (8 + n - 1) / n;
    EXPECT_EQ(flat->shard_numel(), share);
    EXPECT_EQ(flat->padded_numel(), share * n);
    EXPECT_FALSE(flat->gathered());
    EXPECT_EQ(flat->gathered_bytes(), 0) << "released: the gathered storage holds no bytes";
    EXPECT_EQ(linear->weight.numel(), 0) << "a released parameter reads as empty, not as freed memory";
    const auto padded = torch::cat({full, torch::zeros({share * n - 8})});
    EXPECT_TRUE(torch::equal(flat->shard(), padded.narrow(0, c.rank() * share, share))) << "rank " << c.rank();
    // What a full checkpoint's save does with each unit (Note [A full save gathers to rank 0]): the
    // root gets the unit whole, bit for bit; the others get nothing back (no gathered copy).
    for (int64_t root : {int64_t{0}, n - 1}) {
      const auto gathered = flat->gather_shards_to(flat->shard(), root);
      if (c.rank() == root) {
        ASSERT_TRUE(gathered.defined());
        EXPECT_TRUE(torch::equal(gathered, full)) << "root " << root;
      } else {
        EXPECT_FALSE(gathered.defined()) << "rank " << c.rank() << " holds a gathered unit (root " << root << ")";
      }
    }
    flat->gather();
    EXPECT_EQ(flat->gathered_bytes(), share * n * 4);
    EXPECT_TRUE(torch::equal(linear->weight.detach().flatten(), full.narrow(0, 0, 6)));
    EXPECT_TRUE(torch::equal(linear->bias.detach(), full.narrow(0, 6, 2)));
    const auto values = flat->full_parameters();
    ASSERT_EQ(values.size(), 2u);
    EXPECT_TRUE(torch::equal(torch::cat({values[0].flatten(), values[1]}), full));
  });
}

TEST_P(FlatParameterTest, AUnitsBackwardLeavesTheMeanGradientOfTheShardAndFreesTheRest) {
  const int64_t n = GetParam();
  with_communicators(n, [&](Communicator& c) {
    auto linear = same_linear();
    // The unsharded reference: the mean over ranks of each rank's gradient (input = rank + 1).
    torch::Tensor expected;
    {
      auto reference = same_linear();
      std::vector<torch::Tensor> grads;
      for (int64_t r = 0; r < n; ++r) {
        reference->zero_grad();
        reference->forward(torch::full({1, 3}, static_cast<double>(r + 1))).sum().backward();
        grads.push_back(torch::cat({reference->weight.grad().flatten(), reference->bias.grad().flatten()}));
      }
      expected = torch::stack(grads).mean(0);
    }
    UnitSettings settings;
    settings.pre_divide = gradient_pre_divide_factor(n);
    ReduceScatterBucket bucket(c, 0);  // no bucket: launched when its gradients are complete
    auto unit = std::make_shared<FullyShardedUnit>("fc", flatten(linear, c), settings, bucket);
    auto module = wrap(linear);
    module->bind(unit);
    auto output = module->forward(torch::full({1, 3}, static_cast<double>(c.rank() + 1)));
    EXPECT_FALSE(unit->flat().gathered()) << "resharded after forward";
    unit->start_backward(true);
    output.sum().backward();
    EXPECT_EQ(unit->state(), TrainingState::Backward);
    unit->finish_backward();
    bucket.flush();  // the strategy's end of backward: the reduce-scatter in flight completes
    EXPECT_EQ(unit->state(), TrainingState::Idle);
    EXPECT_FALSE(unit->flat().gathered());
    EXPECT_FALSE(linear->weight.grad().defined()) << "the full gradient is dropped when it is launched";
    const int64_t share = unit->flat().shard_numel();
    const auto padded = torch::cat({expected, torch::zeros({share * n - 8})});
    EXPECT_TRUE(torch::allclose(unit->flat().shard().grad(), padded.narrow(0, c.rank() * share, share), 1e-6, 1e-7))
        << "rank " << c.rank() << ": " << unit->flat().shard().grad();
    module->bind(nullptr);
  });
}

TEST_P(FlatParameterTest, ABucketReducesSmallGradientsTogetherToTheSameBits) {
  // Gradients of 3, 5 and 40 chunks' worth (per rank, of float32), each rank's values its own; a
  // 1 KiB bucket takes the first two together and sends the large one alone.
  const int64_t n = GetParam();
  with_communicators(n, [&](Communicator& c) {
    std::vector<torch::Tensor> flats;
    for (const int64_t m : {3, 5, 400}) {
      flats.push_back(torch::linspace(-1.0, 1.0, n * m) * static_cast<double>(c.rank() + 1) / 3.0);
    }
    auto run = [&](int64_t cap_bytes) {
      ReduceScatterBucket bucket(c, cap_bytes);
      std::vector<torch::Tensor> results(flats.size());
      c.reset_counters();
      for (size_t i = 0; i < flats.size(); ++i) {
        bucket.reduce(flats[i].clone(), [&results, i](const torch::Tensor& r) { results[i] = r.clone(); });
      }
      bucket.flush();
      EXPECT_TRUE(bucket.empty());
      return std::make_pair(results, c.counters()[CollectiveKind::ReduceScatter].calls);
    };
    const auto [alone, alone_calls] = run(0);
    const auto [bucketed, bucketed_calls] = run(1024);
    EXPECT_EQ(alone_calls, 3);
    EXPECT_EQ(bucketed_calls, 2) << "the two small ones together, the large one alone";
    for (size_t i = 0; i < flats.size(); ++i) {
      ASSERT_TRUE(alone[i].defined() && bucketed[i].defined()) << i;
      EXPECT_TRUE(torch::equal(alone[i], bucketed[i])) << "rank " << c.rank() << ", gradient " << i;
    }
  });
}

TEST_P(FlatParameterTest, APrefetchGathersInTheBackgroundAndGatherOrReleaseCompletesIt) {
  const int64_t n = GetParam();
  with_communicators(n, [&](Communicator& c) {
    auto linear = same_linear();
    const auto full = values_of(linear);
    auto flat = flatten(linear, c);
    flat->release();
    flat->prefetch();
    EXPECT_TRUE(flat->prefetching());
    EXPECT_FALSE(flat->gathered());
    EXPECT_EQ(flat->gathered_bytes(), flat->padded_numel() * 4) << "the storage is refilled when the gather starts";
    EXPECT_EQ(linear->weight.numel(), 0) << "parameters point at the gathered values only once gather() waited";
    flat->prefetch();  // in flight already: nothing more
    flat->gather();
    EXPECT_FALSE(flat->prefetching());
    EXPECT_TRUE(torch::equal(linear->weight.detach().flatten(), full.narrow(0, 0, 6))) << "rank " << c.rank();
    EXPECT_TRUE(torch::equal(linear->bias.detach(), full.narrow(0, 6, 2)));
    flat->release();
    flat->prefetch();
    flat->release();  // prefetched and never used: waits for the collective, then frees
    EXPECT_FALSE(flat->prefetching());
    EXPECT_FALSE(flat->gathered());
    EXPECT_EQ(flat->gathered_bytes(), 0);
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, FlatParameterTest, ::testing::Values(1, 2, 3),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

std::string state_error(const std::function<void()>& call) {
  try {
    call();
  } catch (const StateError& e) {
    return e.what();
  }
  return "";
}

TEST(UnitLifecycle, CallsOutOfOrderAreStateErrorsNamingTheUnitAndItsState) {
  with_communicators(1, [&](Communicator& c) {
    auto linear = same_linear();
    ReduceScatterBucket bucket(c, 0);
    auto unit = std::make_shared<FullyShardedUnit>("head.fc", flatten(linear, c), UnitSettings{}, bucket);
    unit->before_forward();
    const auto again = state_error([&] { unit->before_forward(); });
    EXPECT_NE(again.find("fsdp unit 'head.fc': forward entered again"), std::string::npos) << again;
    const auto backward_in_forward = state_error([&] { unit->start_backward(true); });
    EXPECT_NE(backward_in_forward.find("in its forward state (expected idle)"), std::string::npos)
        << backward_in_forward;
    unit->abort_forward();
    EXPECT_EQ(unit->state(), TrainingState::Idle);
    // A gradient that reaches the unit outside the strategy's backward.
    auto module = wrap(linear);
    module->bind(unit);
    auto output = module->forward(torch::ones({1, 3}));
    const auto outside = state_error([&] { output.sum().backward(); });
    EXPECT_NE(outside.find("in its idle state (expected backward)"), std::string::npos) << outside;
    EXPECT_NE(outside.find("must go through the strategy"), std::string::npos) << outside;
    module->bind(nullptr);
  });
}

TEST(UnitPrefetch, TheFirstForwardRecordsTheOrderAndLaterOnesGatherTheNextUnitAhead) {
  with_communicators(2, [&](Communicator& c) {
    auto first = same_linear();
    torch::nn::Linear second(2, 2);
    {
      torch::NoGradGuard no_grad;
      second->weight.copy_(torch::tensor({{0.5f, -1.0f}, {0.25f, 2.0f}}));
      second->bias.fill_(0.125);
    }
    const auto x = torch::ones({1, 3});
    const auto expected = second->forward(first->forward(x)).detach();
    ReduceScatterBucket bucket(c, 0);
    ExecutionOrder order;
    UnitSettings settings;
    settings.forward_prefetch = true;
    auto first_unit = std::make_shared<FullyShardedUnit>("0", flatten(first, c), settings, bucket, &order);
    std::vector<std::pair<std::string, torch::Tensor>> parameters;
    for (const auto& item : second->named_parameters()) parameters.emplace_back(item.key(), item.value());
    auto second_unit = std::make_shared<FullyShardedUnit>(
        "1", std::make_unique<FlatParameter>(std::move(parameters), c, torch::kFloat), settings, bucket, &order);
    auto first_module = wrap(first);
    auto second_module = wrap(second);
    first_module->bind(first_unit);
    second_module->bind(second_unit);
    torch::NoGradGuard no_grad;
    bool prefetched_during_first = false;
    const auto run = [&] {
      auto hidden = first_module->forward_with([&] {
        prefetched_during_first = second_unit->flat().prefetching();
        return first->forward(x);
      });
      return second_module->forward(hidden);
    };
    order.start();
    EXPECT_TRUE(torch::equal(run(), expected));
    order.stop();
    EXPECT_EQ(order.units(), (std::vector<FullyShardedUnit*>{first_unit.get(), second_unit.get()}));
    EXPECT_FALSE(prefetched_during_first) << "nothing to prefetch by while the order is being recorded";
    EXPECT_EQ(order.after(first_unit.get()), second_unit.get());
    EXPECT_EQ(order.before(first_unit.get()), nullptr);
    order.start();  // recorded already: nothing changes
    EXPECT_TRUE(torch::equal(run(), expected)) << "rank " << c.rank();
    EXPECT_TRUE(prefetched_during_first) << "the second unit's gather was in flight while the first computed";
    EXPECT_FALSE(second_unit->flat().gathered()) << "released after its forward, as without prefetch";
    first_module->bind(nullptr);
    second_module->bind(nullptr);
  });
}

TEST(UnitLifecycle, AnUnboundWrapperOnlyForwardsAndKeepsTheWrappedNames) {
  torch::nn::Sequential net(torch::nn::Linear(3, 4), wrap(torch::nn::Linear(4, 2)));
  std::vector<std::string> names;
  for (const auto& item : net->named_parameters()) names.push_back(item.key());
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias"}));
  const auto x = torch::ones({2, 3});
  auto* inner = dynamic_cast<torch::nn::LinearImpl*>(&net[1]->as<FullyShardedImpl>()->wrapped());
  ASSERT_NE(inner, nullptr);
  EXPECT_TRUE(torch::equal(net->forward(x), inner->forward(net[0]->as<torch::nn::LinearImpl>()->forward(x))));
  net->eval();
  EXPECT_FALSE(inner->is_training()) << "train()/eval() reach the wrapped module";
}

}  // namespace
}  // namespace volt::fsdp

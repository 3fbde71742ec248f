// The DDP reducer on 2-3 ranks as threads over Gloo, against one process as the oracle: after
// every optimizer step each rank's parameters must equal those of one process that trained on the
// whole batch (fp32, 1e-6). Also observed directly: buckets launch during backward, buckets are
// rebuilt in rank 0's ready order, one reduction per bucket per step under no_sync, static graph
// with accumulation, unused parameters with and without the option, bucket-view aliasing, and
// hook exceptions rethrown on the training thread.
#include <gtest/gtest.h>

#include <mutex>

#include "strategies/ddp/reducer.h"
#include "tests/ddp/reducer_harness.h"
#include "tests/distributed/thread_ranks.h"
#include "core/error.h"

namespace volt::ddp {
namespace {

using testing::loopback_options;
using testing::run_thread_ranks;
using harness::make_net;
using harness::names_of;
using harness::Net;
using harness::tiny_buckets;

torch::Tensor flat(const torch::nn::Module& m) {
  std::vector<torch::Tensor> parts;
  for (const auto& p : m.parameters()) parts.push_back(p.detach().flatten());
  return torch::cat(parts);
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(torch::nn::Module& m, bool adam) {
  if (adam) return std::make_unique<torch::optim::Adam>(m.parameters(), torch::optim::AdamOptions(1e-2));
  return std::make_unique<torch::optim::SGD>(m.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
}

void clear_gradients(torch::nn::Module& m, bool in_place) {
  for (auto& p : m.parameters()) {
    if (!p.grad().defined()) continue;
    if (in_place) {
      p.mutable_grad().zero_();
    } else {
      p.mutable_grad().reset();
    }
  }
}

// A micro-batch: inputs and targets of the global batch (ranks take equal contiguous shares).
struct MicroBatch {
  torch::Tensor x, y;
};
using Step = std::vector<MicroBatch>;  // micro-batches of one optimizer step

// `steps` steps of `micro` micro-batches of `sizes[s]` samples each (the last may be smaller:
// uneven last batches).
std::vector<Step> make_steps(const std::vector<int64_t>& sizes, int64_t micro) {
  torch::manual_seed(1);
  std::vector<Step> steps;
  for (const auto size : sizes) {
    Step step;
    for (int64_t m = 0; m < micro; ++m) step.push_back({torch::randn({size, 8}), torch::randn({size, 4})});
    steps.push_back(step);
  }
  return steps;
}

// Which rank uses `branch` (every rank when empty... see ScenarioOptions).
struct Scenario {
  int64_t world = 2;
  bool adam = false;
  ReducerOptions reducer;
  std::vector<int64_t> batch_sizes{8, 8, 8, 4};  // global batch per step; the last is uneven
  int64_t micro_batches = 1;
  bool extras = false;
  std::function<bool(int64_t rank)> uses_branch = [](int64_t) { return false; };
  std::function<std::unique_ptr<CommHook>(Communicator&)> hook;  // null: the default all_reduce
};

torch::Tensor shard(const torch::Tensor& t, int64_t rank, int64_t world) {
  const int64_t part = t.size(0) / world;
  return t.narrow(0, rank * part, part);
}

torch::Tensor rank_loss(Net& net, const MicroBatch& mb, int64_t rank, const Scenario& s, int64_t micro) {
  const auto out = net.forward(shard(mb.x, rank, s.world), s.uses_branch(rank));
  return torch::mse_loss(out, shard(mb.y, rank, s.world)) / static_cast<double>(micro);
}

// One process: the mean over the ranks' shares of each micro-batch, accumulated.
std::vector<torch::Tensor> reference_trajectory(const Scenario& s, const std::vector<Step>& steps) {
  auto net = make_net(s.extras);
  auto optimizer = make_optimizer(*net, s.adam);
  std::vector<torch::Tensor> trajectory;
  for (const auto& step : steps) {
    for (const auto& mb : step) {
      torch::Tensor loss;
      for (int64_t r = 0; r < s.world; ++r) {
        auto l = rank_loss(*net, mb, r, s, s.micro_batches) / static_cast<double>(s.world);
        loss = loss.defined() ? loss + l : l;
      }
      loss.backward();
    }
    optimizer->step();
    clear_gradients(*net, false);
    trajectory.push_back(flat(*net).clone());
  }
  return trajectory;
}

struct RankRecord {
  std::vector<double> max_error;  // per step, vs the reference
  int64_t all_reduce_calls_first_step = 0;
  int64_t all_reduce_calls_last_step = 0;
  size_t buckets = 0;
  std::string error;
};

// Trains with DDP on s.world thread ranks; `inspect(rank, reducer, net)` runs after every step.
std::vector<RankRecord> train_ddp(const Scenario& s, const std::vector<Step>& steps,
                                  const std::vector<torch::Tensor>& reference,
                                  const std::function<void(int64_t, Reducer&, Net&)>& inspect = nullptr) {
  std::vector<std::shared_ptr<Net>> nets;
  for (int64_t r = 0; r < s.world; ++r) nets.push_back(make_net(s.extras));
  std::vector<RankRecord> records(static_cast<size_t>(s.world));
  const auto errors = run_thread_ranks(s.world, [&](int64_t rank, int64_t port) {
    auto comm = Communicator::connect(loopback_options(rank, s.world, port));
    auto& net = *nets[static_cast<size_t>(rank)];
    auto& record = records[static_cast<size_t>(rank)];
    Reducer reducer(net.parameters(), names_of(net), *comm, s.reducer);
    if (s.hook) reducer.set_comm_hook(s.hook(*comm));
    auto optimizer = make_optimizer(net, s.adam);
    for (size_t step = 0; step < steps.size(); ++step) {
      const auto before = comm->counters();
      for (int64_t m = 0; m < s.micro_batches; ++m) {
        reducer.set_require_sync(m + 1 == s.micro_batches);
        auto loss = rank_loss(net, steps[step][static_cast<size_t>(m)], rank, s, s.micro_batches);
        reducer.prepare_for_backward(loss);
        loss.backward();
        reducer.finalize_backward();
      }
      const int64_t calls = (comm->counters() - before)[CollectiveKind::AllReduce].calls;
      if (step == 0) record.all_reduce_calls_first_step = calls;
      record.all_reduce_calls_last_step = calls;
      record.buckets = reducer.num_buckets();
      optimizer->step();
      if (inspect) inspect(rank, reducer, net);
      clear_gradients(net, s.reducer.gradient_as_bucket_view);
      record.max_error.push_back((flat(net) - reference[step]).abs().max().item<double>());
    }
  });
  for (size_t r = 0; r < errors.size(); ++r) records[r].error = errors[r];
  return records;
}

void expect_matches_reference(const std::vector<RankRecord>& records, double tolerance = 1e-6) {
  for (size_t r = 0; r < records.size(); ++r) {
    ASSERT_EQ(records[r].error, "") << "rank " << r;
    for (size_t step = 0; step < records[r].max_error.size(); ++step) {
      EXPECT_LE(records[r].max_error[step], tolerance) << "rank " << r << " step " << step;
    }
  }
}

// ---- equivalence with one process

struct EquivalenceCase {
  bool adam;
  bool bucket_view;
  int64_t world;
};

class EquivalenceTest : public ::testing::TestWithParam<EquivalenceCase> {};

TEST_P(EquivalenceTest, RanksOnDisjointSharesEqualOneProcessOnTheWholeBatchAfterEveryStep) {
  Scenario s;
  s.adam = GetParam().adam;
  s.world = GetParam().world;
  s.batch_sizes = {12, 12, 12, 6};  // the last global batch is smaller: uneven last batches
  s.reducer = tiny_buckets();
  s.reducer.gradient_as_bucket_view = GetParam().bucket_view;
  const auto steps = make_steps(s.batch_sizes, 1);
  const auto records = train_ddp(s, steps, reference_trajectory(s, steps));
  expect_matches_reference(records);
  EXPECT_GE(records[0].buckets, 2u) << "the test needs several buckets";
}

INSTANTIATE_TEST_SUITE_P(Optimizers, EquivalenceTest,
                         ::testing::Values(EquivalenceCase{false, false, 2}, EquivalenceCase{true, false, 2},
                                           EquivalenceCase{false, true, 2}, EquivalenceCase{true, true, 3}),
                         [](const auto& info) {
                           return std::string(info.param.adam ? "Adam" : "SGD") +
                                  (info.param.bucket_view ? "_BucketView" : "_Copies") + "_world" +
                                  std::to_string(info.param.world);
                         });

// ---- accumulation

class AccumulationTest : public ::testing::TestWithParam<bool> {};

TEST_P(AccumulationTest, NoSyncMicroBatchesReduceEachBucketOncePerStep) {
  Scenario s;
  s.adam = true;
  s.micro_batches = 3;
  s.reducer = tiny_buckets();
  s.reducer.static_graph = GetParam();
  const auto steps = make_steps(s.batch_sizes, s.micro_batches);
  const auto records = train_ddp(s, steps, reference_trajectory(s, steps));
  expect_matches_reference(records);
  for (const auto& r : records) {
    // Exactly one all_reduce per bucket for three micro-batches; static graph's recording
    // iteration adds one for the map of used parameters.
    EXPECT_EQ(r.all_reduce_calls_first_step, static_cast<int64_t>(r.buckets) + (GetParam() ? 1 : 0));
    EXPECT_EQ(r.all_reduce_calls_last_step, static_cast<int64_t>(r.buckets));
    EXPECT_GE(r.buckets, 2u);
  }
}

INSTANTIATE_TEST_SUITE_P(StaticGraph, AccumulationTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "StaticGraph" : "Dynamic"; });

// ---- unused parameters

TEST(UnusedParametersTest, WithoutTheOptionEveryRankFailsNamingThemInsteadOfHanging) {
  Scenario s;
  s.extras = true;  // branch and spare exist, the loss uses neither
  s.reducer = tiny_buckets();
  const auto steps = make_steps({8}, 1);
  const auto records = train_ddp(s, steps, reference_trajectory(s, steps));
  for (size_t r = 0; r < records.size(); ++r) {
    EXPECT_NE(records[r].error.find("'branch.weight'"), std::string::npos) << "rank " << r << ": " << records[r].error;
    EXPECT_NE(records[r].error.find("'spare.bias'"), std::string::npos) << records[r].error;
    EXPECT_NE(records[r].error.find("find_unused_parameters=true"), std::string::npos) << records[r].error;
    // Instead of hanging: a rank that waited for the others would fail at the collective's
    // timeout, with a message naming the timeout and no parameter (no wall-clock bound needed).
    EXPECT_EQ(records[r].error.find("timeout"), std::string::npos) << records[r].error;
  }
}

TEST(UnusedParametersTest, WithTheOptionParametersUsedOnSomeRanksAreAveragedAndUnusedOnesKeepNoGradient) {
  Scenario s;
  s.adam = true;  // a zero gradient would still move Adam's parameters: "no gradient" must stay none
  s.extras = true;
  s.uses_branch = [](int64_t rank) { return rank == 0; };
  s.reducer = tiny_buckets();
  s.reducer.find_unused_parameters = true;
  const auto steps = make_steps(s.batch_sizes, 1);
  bool spare_never_got_a_gradient = true;
  std::mutex mutex;
  const auto records = train_ddp(s, steps, reference_trajectory(s, steps), [&](int64_t, Reducer&, Net& net) {
    std::lock_guard<std::mutex> lock(mutex);
    spare_never_got_a_gradient &= !net.spare->weight.grad().defined() && !net.spare->bias.grad().defined();
  });
  expect_matches_reference(records);
  EXPECT_TRUE(spare_never_got_a_gradient);
}

TEST(UnusedParametersTest, StaticGraphRecordsTheUnusedSetOnce) {
  Scenario s;
  s.adam = true;
  s.extras = true;
  s.uses_branch = [](int64_t) { return true; };  // spare unused on every rank, every iteration
  s.reducer = tiny_buckets();
  s.reducer.static_graph = true;
  const auto steps = make_steps(s.batch_sizes, 1);
  const auto records = train_ddp(s, steps, reference_trajectory(s, steps));
  expect_matches_reference(records);
}

// ---- overlap, order, views, hooks

TEST(ReducerTest, ABucketIsReducedBeforeBackwardEnds) {
  Scenario s;
  s.reducer = tiny_buckets();
  std::vector<std::shared_ptr<Net>> nets{make_net(), make_net()};
  std::vector<std::vector<std::pair<ReducerEvent, size_t>>> events(2);
  const auto steps = make_steps({8}, 1);
  const auto errors = run_thread_ranks(2, [&](int64_t rank, int64_t port) {
    auto comm = Communicator::connect(loopback_options(rank, 2, port));
    auto local = nets[static_cast<size_t>(rank)];
    Reducer reducer(local->parameters(), names_of(*local), *comm, s.reducer);
    auto& log = events[static_cast<size_t>(rank)];
    bool in_backward = false;
    bool launched_inside_backward = false;
    reducer.set_event_listener([&](ReducerEvent e, size_t v) {
      log.emplace_back(e, v);
      if (e == ReducerEvent::BucketLaunched && v == 0 && in_backward) launched_inside_backward = true;
    });
    auto loss = rank_loss(*local, steps[0][0], rank, s, 1);
    reducer.prepare_for_backward(loss);
    in_backward = true;
    loss.backward();
    in_backward = false;
    reducer.finalize_backward();
    check<Error>(launched_inside_backward, "bucket 0 was not launched inside backward");
  });
  for (size_t r = 0; r < 2; ++r) {
    ASSERT_EQ(errors[r], "") << "rank " << r;
    const auto& log = events[r];
    size_t first_launch = log.size(), last_ready = 0, launches = 0;
    for (size_t i = 0; i < log.size(); ++i) {
      if (log[i].first == ReducerEvent::BucketLaunched) {
        first_launch = std::min(first_launch, i);
        ++launches;
      }
      if (log[i].first == ReducerEvent::GradientReady) last_ready = i;
    }
    EXPECT_GT(launches, 1u);
    EXPECT_LT(first_launch, last_ready) << "rank " << r << ": the first bucket must start while gradients still arrive";
  }
}

// `p` and `q` are independent branches; each rank builds them in a different order in forward,
// so autograd finishes them in a different order (later nodes run first).
struct TwoBranches : torch::nn::Module {
  torch::nn::Linear p{nullptr}, q{nullptr};
  TwoBranches() {
    p = register_module("p", torch::nn::Linear(8, 4));
    q = register_module("q", torch::nn::Linear(8, 4));
  }
  torch::Tensor forward(const torch::Tensor& x, bool p_first) {
    if (p_first) {
      auto a = p(x);
      return a + q(x);
    }
    auto b = q(x);
    return p(x) + b;
  }
};

TEST(ReducerTest, BucketsAreRebuiltInRankZerosReadyOrder) {
  std::vector<std::vector<size_t>> ready(2);
  std::vector<std::vector<std::vector<size_t>>> initial(2), rebuilt(2);
  const auto errors = run_thread_ranks(2, [&](int64_t rank, int64_t port) {
    auto comm = Communicator::connect(loopback_options(rank, 2, port));
    auto net = std::make_shared<TwoBranches>();
    ReducerOptions options;
    options.bucket_cap_mb = 1.0 / (1 << 20);  // one parameter per bucket
    Reducer reducer(net->parameters(), names_of(*net), *comm, options);
    auto& order = ready[static_cast<size_t>(rank)];
    reducer.set_event_listener([&](ReducerEvent e, size_t v) {
      if (e == ReducerEvent::GradientReady && reducer.synchronized_iterations() == 0) order.push_back(v);
    });
    initial[static_cast<size_t>(rank)] = reducer.bucket_assignment();
    for (int iteration = 0; iteration < 2; ++iteration) {
      auto loss = net->forward(torch::ones({2, 8}), rank != 0).sum();
      reducer.prepare_for_backward(loss);
      loss.backward();
      reducer.finalize_backward();
    }
    check<Error>(reducer.buckets_rebuilt(), "buckets were not rebuilt");
    rebuilt[static_cast<size_t>(rank)] = reducer.bucket_assignment();
  });
  ASSERT_EQ(errors[0], "");
  ASSERT_EQ(errors[1], "");
  ASSERT_EQ(ready[0].size(), 4u);
  EXPECT_NE(ready[0], ready[1]) << "the ranks should have produced gradients in different orders";
  std::vector<std::vector<size_t>> expected;
  for (const size_t index : ready[0]) expected.push_back({index});
  EXPECT_EQ(rebuilt[0], expected) << "rank 0's buckets follow its ready order";
  EXPECT_EQ(rebuilt[1], expected) << "rank 1 adopts rank 0's order";
  EXPECT_EQ(initial[0], (std::vector<std::vector<size_t>>{{3}, {2}, {1}, {0}}));
}

TEST(ReducerTest, BucketViewGradientsAliasTheBuffersAndSaveTheCopy) {
  Scenario s;
  s.reducer = tiny_buckets();
  s.reducer.gradient_as_bucket_view = true;
  const auto steps = make_steps({8, 8, 8}, 1);
  std::mutex mutex;
  std::vector<std::string> problems;
  const auto records = train_ddp(s, steps, reference_trajectory(s, steps), [&](int64_t rank, Reducer& reducer, Net&) {
    int64_t bucket_bytes = 0, grad_bytes = 0;
    for (size_t b = 0; b < reducer.num_buckets(); ++b) bucket_bytes += reducer.bucket(b).bytes();
    const auto assignment = reducer.bucket_assignment();
    for (size_t b = 0; b < assignment.size(); ++b) {
      const auto& buffer = reducer.bucket(b).buffer();
      const auto* begin = static_cast<const char*>(buffer.data_ptr());
      for (const size_t index : assignment[b]) {
        const auto& grad = reducer.parameters()[index].grad();
        const auto* at = static_cast<const char*>(grad.data_ptr());
        grad_bytes += grad.numel() * static_cast<int64_t>(grad.element_size());
        if (!grad.is_alias_of(buffer) || at < begin || at >= begin + reducer.bucket(b).bytes()) {
          std::lock_guard<std::mutex> lock(mutex);
          problems.push_back("rank " + std::to_string(rank) + ": parameter " + std::to_string(index) +
                             "'s gradient is not a view of bucket " + std::to_string(b));
        }
      }
    }
    if (grad_bytes != bucket_bytes) {
      std::lock_guard<std::mutex> lock(mutex);
      problems.push_back("gradient bytes " + std::to_string(grad_bytes) + " != bucket bytes " +
                         std::to_string(bucket_bytes));
    }
  });
  expect_matches_reference(records);
  EXPECT_TRUE(problems.empty()) << problems.front();
}

class ThrowingHook : public CommHook {
 public:
  explicit ThrowingHook(Communicator& c) : inner_(c) {}
  std::string name() const override { return "throwing"; }
  CollectiveHandle run(GradBucket& bucket) override {
    if (bucket.index == 1) throw std::out_of_range("hook refused bucket 1");
    return inner_.run(bucket);
  }

 private:
  AllReduceHook inner_;
};

TEST(ReducerTest, ExceptionsInHooksAreRethrownOnTheTrainingThread) {
  std::vector<std::string> caught(2);
  std::vector<std::shared_ptr<Net>> nets{make_net(), make_net()};
  const auto errors = run_thread_ranks(2, [&](int64_t rank, int64_t port) {
    auto comm = Communicator::connect(loopback_options(rank, 2, port));
    auto net = nets[static_cast<size_t>(rank)];
    Reducer reducer(net->parameters(), names_of(*net), *comm, tiny_buckets());
    reducer.set_comm_hook(std::make_unique<ThrowingHook>(*comm));
    auto loss = net->forward(torch::ones({2, 8}), false).sum();
    reducer.prepare_for_backward(loss);
    loss.backward();  // the hook throws inside backward; backward itself completes
    try {
      reducer.finalize_backward();
    } catch (const std::out_of_range& e) {
      caught[static_cast<size_t>(rank)] = e.what();
    }
  });
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    EXPECT_EQ(caught[r], "hook refused bucket 1") << "rank " << r;
  }
}

// Two rounds per bucket, the second started by a continuation (Note [Chained collectives]):
// half of the mean gradient each, so the sum is the mean the default hook computes.
class TwoRoundHook : public CommHook {
 public:
  explicit TwoRoundHook(Communicator& c) : communicator_(c) {}
  std::string name() const override { return "two_round"; }
  CollectiveHandle run(GradBucket& bucket) override {
    auto half = bucket.buffer / (2.0 * static_cast<double>(communicator_.size()));
    return communicator_.all_reduce_async(half.clone()).then_collective([this, half](const torch::Tensor& first) {
      return communicator_.all_reduce_async(half.clone()).then([first](const torch::Tensor& second) {
        return first + second;
      });
    });
  }

 private:
  Communicator& communicator_;
};

TEST(ReducerTest, AHookThatChainsASecondCollectivePerBucketMatchesOneProcess) {
  Scenario s;
  s.adam = true;
  s.world = 3;
  s.batch_sizes = {12, 12, 12, 6};
  s.micro_batches = 2;
  s.reducer = tiny_buckets();
  s.hook = [](Communicator& c) { return std::make_unique<TwoRoundHook>(c); };
  const auto steps = make_steps(s.batch_sizes, s.micro_batches);
  const auto records = train_ddp(s, steps, reference_trajectory(s, steps));
  expect_matches_reference(records);
  for (const auto& r : records) {
    EXPECT_GE(r.buckets, 2u);
    EXPECT_EQ(r.all_reduce_calls_last_step, 2 * static_cast<int64_t>(r.buckets)) << "two rounds per bucket";
  }
}

TEST(ReducerTest, ASecondGradientWithoutStaticGraphIsAnErrorNamingTheParameter) {
  std::vector<std::shared_ptr<Net>> nets{make_net(), make_net()};
  const auto errors = run_thread_ranks(2, [&](int64_t rank, int64_t port) {
    auto comm = Communicator::connect(loopback_options(rank, 2, port));
    auto net = nets[static_cast<size_t>(rank)];
    Reducer reducer(net->parameters(), names_of(*net), *comm, tiny_buckets());
    auto x = torch::ones({2, 8});
    auto loss = net->forward(x, false).sum();
    reducer.prepare_for_backward(loss);
    loss.backward(/*gradient=*/{}, /*retain_graph=*/true);
    loss.backward();  // the same graph again: every accumulator fires twice
    reducer.finalize_backward();
  });
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r].find("received a second gradient"), std::string::npos) << "rank " << r << ": " << errors[r];
    EXPECT_NE(errors[r].find("static_graph=true"), std::string::npos) << errors[r];
  }
}

TEST(ReducerTest, StaticGraphReducesAParameterWithTwoGradientsOnceAfterTheSecond) {
  // Two backward passes over one graph per iteration: each accumulator fires twice, the second
  // time with the total. With static_graph the reducer expects two and reduces after the second.
  std::vector<double> error(2, 1.0);
  std::vector<int64_t> calls(2, 0), buckets(2, 0);
  auto reference = make_net();
  {
    auto loss = reference->forward(torch::ones({2, 8}) * 0.5, false).sum();
    loss.backward({}, true);
    loss.backward();
  }
  std::vector<std::shared_ptr<Net>> nets{make_net(), make_net()};
  const auto errors = run_thread_ranks(2, [&](int64_t rank, int64_t port) {
    auto comm = Communicator::connect(loopback_options(rank, 2, port));
    auto net = nets[static_cast<size_t>(rank)];
    ReducerOptions options = tiny_buckets();
    options.static_graph = true;
    Reducer reducer(net->parameters(), names_of(*net), *comm, options);
    for (int iteration = 0; iteration < 3; ++iteration) {
      for (auto& p : net->parameters()) p.mutable_grad().reset();
      const auto before = comm->counters();
      auto loss = net->forward(torch::ones({2, 8}) * 0.5, false).sum();
      reducer.prepare_for_backward(loss);
      loss.backward({}, true);
      loss.backward();
      reducer.finalize_backward();
      calls[static_cast<size_t>(rank)] = (comm->counters() - before)[CollectiveKind::AllReduce].calls;
    }
    buckets[static_cast<size_t>(rank)] = static_cast<int64_t>(reducer.num_buckets());
    std::vector<torch::Tensor> grads;
    for (const auto& p : net->parameters()) grads.push_back(p.grad().flatten());
    std::vector<torch::Tensor> expected;
    for (const auto& p : reference->parameters()) expected.push_back(p.grad().flatten());  // read-only here
    error[static_cast<size_t>(rank)] = (torch::cat(grads) - torch::cat(expected)).abs().max().item<double>();
  });
  for (size_t r = 0; r < 2; ++r) {
    ASSERT_EQ(errors[r], "") << "rank " << r;
    EXPECT_LE(error[r], 1e-6) << "rank " << r;
    EXPECT_EQ(calls[r], buckets[r]) << "rank " << r << ": one all_reduce per bucket";
  }
}

}  // namespace
}  // namespace volt::ddp

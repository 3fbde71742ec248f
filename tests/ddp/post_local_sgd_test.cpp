// Post-local-SGD's parts on 4 ranks as threads (Reducer + the post_local_sgd hook + its averager, as
// DDPStrategy composes them): gradients are the world's mean until start_local_sgd_iter and the
// subgroup's after (or each rank's own without post_local_gradient_allreduce); the switch counts
// synchronized iterations, not micro-batches; after the switch the world carries 1/period of
// DDP's bytes per step, counted, and the subgroup the gradients; options and their errors at
// Trainer construction. Parity with PyTorch's own hook and averager: post_local_sgd_parity_test.cpp.
#include <gtest/gtest.h>

#include "strategies/ddp/comm_hook_registry.h"
#include "strategies/ddp/ddp_strategy.h"
#include "strategies/ddp/hooks/post_local_sgd_hook.h"
#include "strategies/ddp/reducer.h"
#include "strategies/strategy_registry.h"
#include "tests/ddp/reducer_harness.h"
#include "tests/distributed/thread_ranks.h"
#include "tests/support/regression_problem.h"
#include "tests/support/test_support.h"

namespace volt::ddp::local_sgd_tests {
namespace {

using harness::flat_grads;
using harness::make_net;
using harness::names_of;
using harness::Net;
using testing::loopback_options;
using testing::run_thread_ranks;

constexpr int64_t kRanks = 4;

torch::Tensor loss_of(Net& net, int64_t rank, int64_t step, int64_t micro) {
  const auto x = torch::randn({6, 8}, at::detail::createCPUGenerator(static_cast<uint64_t>(5000 + 100 * step + 10 * micro + rank)));
  return net.forward(x, false).pow(2).mean();
}

struct Step {
  torch::Tensor grads;        // after the reduction
  int64_t world_bytes = 0;    // this step's payload over the world (hook and averager)
  int64_t subgroup_bytes = 0; // and within the subgroup
};

struct RankRun {
  std::vector<Step> steps;
  StateDict hook_state;
};

// `steps` SGD steps (lr 0.1) of `micro` micro-batches (all but the last in no_sync) on each of 4
// ranks, with the hook `spec` ("post_local_sgd:...", "powersgd:..." or "allreduce") names and, for
// post_local_sgd, its averager after each step, as DDPStrategy runs them. `closes_without_backward`:
// the last micro-batch runs no backward, and the window is reduced as the strategy then reduces it
// (Note [A window that closes without backward]).
std::vector<RankRun> train(const std::string& spec, int64_t steps, int64_t micro = 1,
                           bool closes_without_backward = false) {
  std::vector<std::shared_ptr<Net>> nets;
  for (int64_t r = 0; r < kRanks; ++r) nets.push_back(make_net());
  std::vector<RankRun> runs(kRanks);
  const auto errors = run_thread_ranks(kRanks, [&](int64_t rank, int64_t port) {
    auto world = Communicator::connect(loopback_options(rank, kRanks, port));
    const auto hook_spec = comm_hook_registry().create(parse_named_spec(spec, "test").name, comm_hook_registry().parse(spec));
    std::unique_ptr<Topology> topology;
    std::unique_ptr<averaging::ModelAverager> averager;
    if (const auto* on_topology = hook_spec->on_topology()) {
      topology = Topology::build(world, {.global_rank = rank, .world_size = kRanks, .local_rank = rank,
                                         .local_world_size = kRanks}, on_topology->node_size);
      averager = on_topology->make_averager(*topology);
    }
    Net& net = *nets[static_cast<size_t>(rank)];
    Reducer reducer(net.parameters(), names_of(net), *world, ReducerOptions{});
    reducer.set_comm_hook(hook_spec->make(*world, topology.get()));
    Communicator* subgroup = topology ? &topology->node() : nullptr;
    auto& run = runs[static_cast<size_t>(rank)];
    for (int64_t s = 0; s < steps; ++s) {
      const auto world_before = world->counters().total_bytes();
      const auto subgroup_before = subgroup && subgroup != world.get() ? subgroup->counters().total_bytes() : 0;
      for (int64_t m = 0; m < micro; ++m) {
        if (closes_without_backward && m + 1 == micro) {
          reducer.reduce_accumulated_gradients();
          break;
        }
        reducer.set_require_sync(m + 1 == micro);
        auto loss = loss_of(net, rank, s, m);
        reducer.prepare_for_backward(loss);
        loss.backward();
        reducer.finalize_backward();
      }
      Step step;
      step.grads = flat_grads(net).clone();
      {
        torch::NoGradGuard no_grad;
        for (auto& p : net.parameters()) p.sub_(0.1 * p.grad());
      }
      if (averager) averager->average_parameters(net.parameters());
      for (auto& p : net.parameters()) p.mutable_grad().reset();
      step.world_bytes = world->counters().total_bytes() - world_before;
      if (subgroup && subgroup != world.get()) step.subgroup_bytes = subgroup->counters().total_bytes() - subgroup_before;
      run.steps.push_back(step);
    }
    run.hook_state = reducer.state_dict().child("comm_hook").child("state");
  });
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  return runs;
}

const torch::Tensor& grads(const std::vector<RankRun>& runs, int64_t rank, int64_t step) {
  return runs[static_cast<size_t>(rank)].steps[static_cast<size_t>(step)].grads;
}

// Issue 34.5: a window whose closing micro-batch runs no backward is reduced through the hook,
// not averaged over the world: in the local phase within the subgroup, and the hook counts it.
TEST(PostLocalSGD, AWindowThatClosesWithoutBackwardGoesThroughTheHookAndItsSubgroup) {
  const std::string spec = "post_local_sgd:start_local_sgd_iter=2,subgroup_size=2,model_averaging_period=100";
  const auto runs = train(spec, 4, 2, true);
  const auto closed_by_backward = train(spec, 4, 2);
  const auto plain = train("allreduce", 4, 2, true);
  for (int64_t step = 0; step < 4; ++step) {
    // Over the world and within the subgroup, what a window closed by a backward sends (the
    // averager's first average, at its warm-up's end, included).
    for (int64_t r = 0; r < kRanks; ++r) {
      const auto& got = runs[static_cast<size_t>(r)].steps[static_cast<size_t>(step)];
      const auto& want = closed_by_backward[static_cast<size_t>(r)].steps[static_cast<size_t>(step)];
      EXPECT_EQ(got.world_bytes, want.world_bytes) << "step " << step << ", rank " << r;
      EXPECT_EQ(got.subgroup_bytes, want.subgroup_bytes) << "step " << step << ", rank " << r;
    }
    if (step < 2) {  // the global phase: the world's mean, as the plain hook's
      EXPECT_TRUE(torch::allclose(grads(runs, 0, step), grads(plain, 0, step), 1e-6, 1e-7)) << "step " << step;
      continue;
    }
    EXPECT_TRUE(torch::equal(grads(runs, 0, step), grads(runs, 1, step))) << "step " << step << ": ranks 0 and 1 share a subgroup";
    EXPECT_FALSE(torch::allclose(grads(runs, 0, step), grads(runs, 2, step))) << "step " << step << ": the subgroups differ";
    EXPECT_GT(runs[0].steps[static_cast<size_t>(step)].subgroup_bytes, 0) << "step " << step;
  }
  EXPECT_EQ(runs[0].hook_state.get_int("iteration"), 2) << "the hook counted the windows up to its switch";
  const auto powersgd = train("powersgd:start_powersgd_iter=2,matrix_approximation_rank=1", 3, 2, true);
  EXPECT_EQ(powersgd[0].hook_state.get_int("iteration"), 3) << "PowerSGD counted every window";
}

TEST(PostLocalSGD, GradientsAreTheWorldMeanUntilTheStartThenTheSubgroupMean) {
  const auto ddp = train("allreduce", 2);
  const auto runs = train("post_local_sgd:start_local_sgd_iter=2,subgroup_size=2,model_averaging_period=100", 4);
  for (int64_t step = 0; step < 2; ++step) {
    for (int64_t r = 0; r < kRanks; ++r) {
      EXPECT_TRUE(torch::equal(grads(runs, r, step), grads(ddp, r, step))) << "step " << step << ", rank " << r
                                                                           << ": plain DDP before the start";
    }
  }
  for (int64_t step = 2; step < 4; ++step) {
    EXPECT_TRUE(torch::equal(grads(runs, 0, step), grads(runs, 1, step))) << "step " << step << ": ranks 0 and 1 share a subgroup";
    EXPECT_TRUE(torch::equal(grads(runs, 2, step), grads(runs, 3, step))) << "step " << step << ": ranks 2 and 3 share a subgroup";
    EXPECT_FALSE(torch::allclose(grads(runs, 0, step), grads(runs, 2, step))) << "step " << step << ": subgroups differ";
    for (int64_t r = 0; r < kRanks; ++r) {
      EXPECT_EQ(runs[static_cast<size_t>(r)].steps[static_cast<size_t>(step)].subgroup_bytes,
                grads(runs, r, step).numel() * 4) << "step " << step << ": the gradients, within the subgroup";
    }
  }
  EXPECT_EQ(runs[0].hook_state.get_int("iteration"), 2) << "counted up to the start, like PyTorch's state.iter";
}

TEST(PostLocalSGD, WithoutPostLocalGradientAllreduceEachRankKeepsItsOwnGradient) {
  const auto runs = train(
      "post_local_sgd:start_local_sgd_iter=1,subgroup_size=2,post_local_gradient_allreduce=false,model_averaging_period=100",
      3);
  for (int64_t a = 0; a < kRanks; ++a) {
    for (int64_t b = a + 1; b < kRanks; ++b) EXPECT_FALSE(torch::allclose(grads(runs, a, 2), grads(runs, b, 2))) << a << " vs " << b;
  }
  // Step 1 averages (the warm-up's end); step 2 communicates nothing at all.
  EXPECT_EQ(runs[0].steps[2].world_bytes, 0);
  EXPECT_EQ(runs[0].steps[2].subgroup_bytes, 0);
}

TEST(PostLocalSGD, TheSwitchCountsOptimizerStepsNotMicroBatches) {
  // 3 micro-batches per step, start 2: steps 0 and 1 are plain DDP (the world's mean, the same on
  // every rank), step 2 is local, whatever the number of backwards inside no_sync.
  const auto runs = train("post_local_sgd:start_local_sgd_iter=2,subgroup_size=2,model_averaging_period=100", 3, 3);
  EXPECT_TRUE(torch::equal(grads(runs, 0, 1), grads(runs, 3, 1)));
  EXPECT_FALSE(torch::allclose(grads(runs, 0, 2), grads(runs, 3, 2)));
}

TEST(PostLocalSGD, AfterTheSwitchTheWorldCarriesOnePeriodOfDDPsBytesPerStep) {
  constexpr int64_t kStart = 2, kPeriod = 4, kSteps = kStart + 2 * kPeriod;
  const auto ddp = train("allreduce", kSteps);
  const auto runs = train("post_local_sgd:start_local_sgd_iter=2,subgroup_size=2,model_averaging_period=4", kSteps);
  const int64_t ddp_bytes = ddp[0].steps[0].world_bytes;
  EXPECT_EQ(ddp_bytes, grads(ddp, 0, 0).numel() * 4) << "DDP all-reduces every float32 gradient once per step";
  for (int64_t r = 0; r < kRanks; ++r) {
    const auto& steps = runs[static_cast<size_t>(r)].steps;
    const auto& ddp_steps = ddp[static_cast<size_t>(r)].steps;
    int64_t local_world_bytes = 0, ddp_local_phase_bytes = 0;
    for (int64_t s = 0; s < kSteps; ++s) {
      const bool averages = s >= kStart && (s - kStart) % kPeriod == 0;
      // Before the switch, exactly DDP's traffic (step 1's included: the reducer's bucket rebuild).
      const int64_t expected_world = (s < kStart ? ddp_steps[static_cast<size_t>(s)].world_bytes : 0) +
                                     (averages ? ddp_bytes : 0);
      EXPECT_EQ(steps[static_cast<size_t>(s)].world_bytes, expected_world) << "rank " << r << ", step " << s;
      if (s < kStart) continue;
      local_world_bytes += steps[static_cast<size_t>(s)].world_bytes;
      ddp_local_phase_bytes += ddp_steps[static_cast<size_t>(s)].world_bytes;
    }
    EXPECT_EQ(local_world_bytes * kPeriod, ddp_local_phase_bytes) << "rank " << r << ": 1/period of DDP's";
  }
}

using testing::construct_quiet_trainer;

std::string trainer_error(const std::string& strategy, int64_t devices) {
  return testing::trainer_construction_error(strategy, devices);
}

TEST(PostLocalSGD, OptionsAndTheirErrorsAtTrainerConstruction) {
  EXPECT_NE(trainer_error("ddp:comm_hook=post_local_sgd,start_local_sgd_iter=8", 2)
                .find("expected model_averaging_period=P (average the models over the world every P steps) or "
                      "model_averaging_periods=P1:G1,...,Pk:<world size> (hierarchical), got neither"),
            std::string::npos);
  EXPECT_NE(trainer_error("ddp:comm_hook=post_local_sgd,model_averaging_period=0", 2)
                .find("option 'model_averaging_period' expects a value >= 1, got 0"),
            std::string::npos);
  EXPECT_NE(trainer_error("ddp:comm_hook=post_local_sgd,model_averaging_period=2,model_averaging_periods=2:2", 2)
                .find("got both"),
            std::string::npos);
  EXPECT_NE(trainer_error("ddp:comm_hook=post_local_sgd,model_averaging_period=2,subgroup_size=3", 4)
                .find("expected a subgroup_size that divides the world size 4, got 3"),
            std::string::npos);
  EXPECT_NE(trainer_error("ddp:comm_hook=post_local_sgd,model_averaging_periods=2:2,4:4", 8)
                .find("expected the last group size to be the world size 8"),
            std::string::npos);
  EXPECT_NE(trainer_error("ddp:comm_hook=post_local_sgd,model_averaging_periods=2:3,4:4", 4)
                .find("expected each group size to divide the next"),
            std::string::npos);
  EXPECT_NE(trainer_error("ddp:model_averaging_period=4", 2).find("post_local_sgd"), std::string::npos)
      << "a post-local-SGD key without comm_hook=post_local_sgd names the hook it belongs to";
  // Accepted: Lightning's names, a hierarchy written as a list, any divisor of the world size.
  EXPECT_NO_THROW(construct_quiet_trainer("ddp:ddp_comm_hook=post_local_sgd,start_localSGD_iter=8,model_averaging_period=4", 2));
  EXPECT_NO_THROW(construct_quiet_trainer("ddp:comm_hook=post_local_sgd,model_averaging_periods=2:2,4:4,subgroup_size=1", 4));
  EXPECT_NO_THROW(construct_quiet_trainer("ddp:comm_hook=post_local_sgd,start_local_sgd_iter=0,model_averaging_period=1,"
                                    "post_local_gradient_allreduce=false",
                                    4));
  const auto values = comm_hook_registry().parse("post_local_sgd:model_averaging_periods=2:4,8:8,start_local_sgd_iter=3");
  const auto options = PostLocalSGDOptions::schema().from(values);
  EXPECT_EQ(options.model_averaging_periods, (std::vector<averaging::AveragingLevel>{{2, 4}, {8, 8}}));
  EXPECT_EQ(options.start_local_sgd_iter, 3);
  EXPECT_NE(strategy_registry().describe().find("model_averaging_periods"), std::string::npos)
      << "--list-strategies lists the hook's keys";
}

// Note [Post-local-SGD and a sharded optimizer]: the two are refused together, by name.
TEST(PostLocalSGD, AShardedOptimizerIsRefused) {
  const auto message = testing::configuration_error_of(
      [] { construct_quiet_trainer("ddp:comm_hook=post_local_sgd,model_averaging_period=4,shard_optimizer=true", 2); });
  EXPECT_NE(message.find("comm_hook=post_local_sgd with shard_optimizer=true"), std::string::npos) << message;
  EXPECT_NO_THROW(construct_quiet_trainer("ddp:comm_hook=allreduce,shard_optimizer=true", 2));
}

}  // namespace
}  // namespace volt::ddp::local_sgd_tests

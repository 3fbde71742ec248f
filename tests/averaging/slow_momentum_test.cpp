// SlowMo's parts on 4 ranks as threads, as SlowMoStrategy composes them: DDP's Reducer on the node
// group of the Topology, SGD with momentum and a learning rate that changes every step, and the
// SlowMomentumAverager after every optimizer step. Checked against a hand-written one-process
// reference of the paper's formula (Algorithm 1): every rank's parameters after every one of 24
// steps within 1e-6 relative, for 1 and 2 processes per node, with and without memory_efficient
// (bitwise equal to each other); β = 0, α = 1 against DDP within the node plus PyTorch-style periodic
// averaging; bytes per group (within the node every step, across nodes only at averaging steps);
// a checkpoint of the averager mid-run resumes bitwise; options and their errors by name.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "checkpoint/module_state.h"
#include "strategies/averaging/periodic_model_averager.h"
#include "strategies/averaging/slow_momentum_averager.h"
#include "strategies/ddp/reducer.h"
#include "strategies/slowmo/slowmo_strategy.h"
#include "strategies/strategy_registry.h"
#include "tests/ddp/reducer_harness.h"
#include "tests/distributed/thread_ranks.h"
#include "tests/support/regression_problem.h"
#include "tests/support/test_support.h"
#include "trainer/trainer.h"

namespace volt::averaging::slowmo_tests {
namespace {

using ddp::harness::make_net;
using ddp::harness::Net;

constexpr int64_t kRanks = 4, kSteps = 24, kLocalSGD = 3, kSlowMo = 12;

double learning_rate_at(int64_t step) { return 0.1 * std::pow(0.97, static_cast<double>(step)); }

torch::Tensor loss_of(Net& net, int64_t rank, int64_t step) {
  auto generator = at::detail::createCPUGenerator(static_cast<uint64_t>(9000 + 100 * step + rank));
  const auto x = torch::randn({6, 8}, generator);
  const auto y = torch::randn({6, 4}, generator);
  return (net.forward(x, false) - y).pow(2).mean();
}

torch::Tensor flat_parameters(const torch::nn::Module& m) {
  std::vector<torch::Tensor> parts;
  for (const auto& p : m.parameters()) parts.push_back(p.detach().reshape(-1));
  return torch::cat(parts).clone();
}

void set_learning_rate(torch::optim::SGD& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

std::unique_ptr<torch::optim::SGD> make_sgd(Net& net) {
  return std::make_unique<torch::optim::SGD>(net.parameters(),
                                             torch::optim::SGDOptions(learning_rate_at(0)).momentum(0.9));
}

struct Config {
  int64_t per_node = 2;
  bool memory_efficient = true;
  double beta = 0.5, alpha = 1.0;
  int64_t num_shards = 32;  // min(4, num_shards) in effect
};

std::string describe(const Config& c) {
  std::ostringstream out;
  out << "nprocs_per_node=" << c.per_node << ", memory_efficient=" << c.memory_efficient << ", β=" << c.beta
      << ", α=" << c.alpha << ", num_shards=" << c.num_shards;
  return out.str();
}

SlowMomentumOptions averaging_options(const Config& c) {
  return {.momentum = c.beta, .lr = c.alpha, .slowmo_frequency = kSlowMo, .localsgd_frequency = kLocalSGD,
          .memory_efficient = c.memory_efficient, .num_shards = c.num_shards};
}

struct StepRecord {
  torch::Tensor parameters;
  int64_t node_bytes = 0, leaders_bytes = 0, world_bytes = 0;
};

struct RankRun {
  std::vector<StepRecord> steps;
  int64_t buffer_bytes = 0;
};

// What a Reducer on the node group plus an averager do to every rank's parameters; `make_averager`
// builds the averager from the topology and the learning-rate source. `interrupt_at`: after that
// many steps, the averager's and optimizer's states are taken, both rebuilt, and loaded back.
using MakeAverager = std::function<std::unique_ptr<ModelAverager>(Topology&, LearningRates)>;

std::vector<RankRun> train(int64_t per_node, const MakeAverager& make_averager, int64_t interrupt_at = -1) {
  std::vector<std::shared_ptr<Net>> nets;
  for (int64_t r = 0; r < kRanks; ++r) nets.push_back(make_net());
  std::vector<RankRun> runs(kRanks);
  const auto errors = testing::run_thread_ranks(kRanks, [&](int64_t rank, int64_t port) {
    auto world = Communicator::connect(testing::loopback_options(rank, kRanks, port));
    auto topology = Topology::build(world, {.global_rank = rank, .world_size = kRanks, .local_rank = rank,
                                            .local_world_size = kRanks}, per_node);
    Net& net = *nets[static_cast<size_t>(rank)];
    ddp::Reducer reducer(net.parameters(), ddp::harness::names_of(net), topology->node(), ddp::ReducerOptions{});
    auto sgd = make_sgd(net);
    double current_lr = learning_rate_at(0);
    const LearningRates rates = [&] { return std::vector<double>(net.parameters().size(), current_lr); };
    auto averager = make_averager(*topology, rates);
    auto& run = runs[static_cast<size_t>(rank)];
    const auto bytes_of = [](const Communicator* group) { return group ? group->counters().total_bytes() : 0; };
    Communicator* node = topology->node().size() > 1 ? &topology->node() : nullptr;
    Communicator* leaders = topology->leaders() != world.get() ? topology->leaders() : nullptr;
    for (int64_t s = 0; s < kSteps; ++s) {
      StepRecord record;
      const auto node_before = bytes_of(node), leaders_before = bytes_of(leaders), world_before = bytes_of(world.get());
      current_lr = learning_rate_at(s);
      set_learning_rate(*sgd, current_lr);
      auto loss = loss_of(net, rank, s);
      reducer.prepare_for_backward(loss);
      loss.backward();
      reducer.finalize_backward();
      sgd->step();
      averager->average_parameters(net.parameters());
      sgd->zero_grad();
      record.parameters = flat_parameters(net);
      record.node_bytes = bytes_of(node) - node_before;
      record.leaders_bytes = bytes_of(leaders) - leaders_before;
      record.world_bytes = bytes_of(world.get()) - world_before;
      run.steps.push_back(record);
      if (s + 1 == interrupt_at) {  // as a checkpoint and a resumed run would
        const auto averager_state = averager->state_dict();
        torch::serialize::OutputArchive optimizer_state;
        sgd->save(optimizer_state);
        std::ostringstream bytes;
        optimizer_state.save_to(bytes);
        averager = make_averager(*topology, rates);
        averager->load_state_dict(averager_state);
        sgd = make_sgd(net);
        torch::serialize::InputArchive restored;
        std::istringstream in(bytes.str());
        restored.load_from(in);
        sgd->load(restored);
      }
    }
    if (auto* slowmo = dynamic_cast<SlowMomentumAverager*>(averager.get())) run.buffer_bytes = slowmo->buffer_bytes();
  });
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  return runs;
}

std::vector<RankRun> train_slowmo(const Config& c, int64_t interrupt_at = -1) {
  return train(c.per_node, [&c](Topology& topology, LearningRates rates) {
    return std::make_unique<SlowMomentumAverager>(topology, averaging_options(c), std::move(rates));
  }, interrupt_at);
}

// The paper's Algorithm 1 in one process, every rank a net of its own: gradients averaged within
// each node, SGD with momentum, the exact mean over all ranks every kLocalSGD steps, and every
// kSlowMo steps u ← β·u + (x_old − x̄)/γ, x_old ← x_old − α·γ·u, x ← x_old; x_old taken after the
// first step as fairscale takes it (Note [x_old after the first step]): each rank its own, or with
// memory_efficient shard k from rank k.
std::vector<std::vector<torch::Tensor>> reference(const Config& c) {
  torch::NoGradGuard outside;
  std::vector<std::shared_ptr<Net>> nets;
  std::vector<std::unique_ptr<torch::optim::SGD>> sgds;
  for (int64_t r = 0; r < kRanks; ++r) nets.push_back(make_net());
  for (auto& net : nets) sgds.push_back(make_sgd(*net));
  std::vector<torch::Tensor> old(kRanks), u(kRanks);  // x_old and u as rank r sees them
  const bool local_sgd = c.per_node < kRanks, slow_momentum = c.alpha != 1.0 || c.beta != 0.0;
  std::vector<std::vector<torch::Tensor>> out(kRanks);
  const auto set = [&](int64_t rank, const torch::Tensor& flat) {
    int64_t offset = 0;
    for (auto& p : nets[static_cast<size_t>(rank)]->parameters()) {
      p.copy_(flat.narrow(0, offset, p.numel()).view(p.sizes()));
      offset += p.numel();
    }
  };
  const auto set_all = [&](const torch::Tensor& flat) {
    for (int64_t r = 0; r < kRanks; ++r) set(r, flat);
  };
  for (int64_t s = 0; s < kSteps; ++s) {
    const double gamma = learning_rate_at(s);
    for (int64_t r = 0; r < kRanks; ++r) {
      torch::AutoGradMode grad(true);
      loss_of(*nets[static_cast<size_t>(r)], r, s).backward();
    }
    for (int64_t node = 0; node < kRanks / c.per_node; ++node) {
      const auto params_of = [&](int64_t r) { return nets[static_cast<size_t>(r)]->parameters(); };
      for (size_t i = 0; i < params_of(0).size(); ++i) {
        auto mean = torch::zeros_like(params_of(0)[i]);
        for (int64_t r = node * c.per_node; r < (node + 1) * c.per_node; ++r) mean += params_of(r)[i].grad();
        mean /= static_cast<double>(c.per_node);
        for (int64_t r = node * c.per_node; r < (node + 1) * c.per_node; ++r) params_of(r)[i].mutable_grad().copy_(mean);
      }
    }
    for (int64_t r = 0; r < kRanks; ++r) {
      auto& sgd = *sgds[static_cast<size_t>(r)];
      set_learning_rate(sgd, gamma);
      sgd.step();
      sgd.zero_grad();
    }
    if (s == 0) {
      for (int64_t r = 0; r < kRanks; ++r) old[static_cast<size_t>(r)] = flat_parameters(*nets[static_cast<size_t>(r)]);
      if (c.memory_efficient) {  // contiguous shards of ceil(total / shards): shard k from rank k
        const int64_t total = old[0].numel(), shards = std::min(kRanks, c.num_shards);
        const int64_t length = (total + shards - 1) / shards;
        auto assembled = old[0].clone();
        for (int64_t k = 0; k < shards; ++k) {
          const int64_t lo = std::min(total, k * length), hi = std::min(total, (k + 1) * length);
          assembled.narrow(0, lo, hi - lo).copy_(old[static_cast<size_t>(k)].narrow(0, lo, hi - lo));
        }
        old.assign(kRanks, assembled);
      }
      for (int64_t r = 0; r < kRanks; ++r) u[static_cast<size_t>(r)] = torch::zeros_like(old[0]);
    }
    const bool average = local_sgd && (s + 1) % kLocalSGD == 0;
    const bool slow = slow_momentum && (s + 1) % kSlowMo == 0;
    if (average || slow) {
      auto mean = torch::zeros_like(old[0]);
      for (auto& net : nets) mean += flat_parameters(*net);
      mean /= static_cast<double>(kRanks);
      set_all(mean);
      for (int64_t r = 0; slow && r < kRanks; ++r) {
        auto& u_r = u[static_cast<size_t>(r)];
        auto& old_r = old[static_cast<size_t>(r)];
        u_r = c.beta * u_r + (old_r - mean) / gamma;
        old_r = old_r - c.alpha * gamma * u_r;
        set(r, old_r);
      }
    }
    for (int64_t r = 0; r < kRanks; ++r) out[static_cast<size_t>(r)].push_back(flat_parameters(*nets[static_cast<size_t>(r)]));
  }
  return out;
}

double relative_difference(const torch::Tensor& got, const torch::Tensor& expected) {
  return (got - expected).abs().max().item<double>() / expected.abs().max().item<double>();
}

class SlowMoFormula : public ::testing::TestWithParam<Config> {};

TEST_P(SlowMoFormula, EveryRankAfterEveryStepMatchesThePapersFormula) {
  const auto& c = GetParam();
  const auto runs = train_slowmo(c);
  const auto expected = reference(c);
  for (int64_t r = 0; r < kRanks; ++r) {
    for (int64_t s = 0; s < kSteps; ++s) {
      const auto& got = runs[static_cast<size_t>(r)].steps.at(static_cast<size_t>(s)).parameters;
      const auto& want = expected[static_cast<size_t>(r)][static_cast<size_t>(s)];
      ASSERT_LE(relative_difference(got, want), 1e-6) << describe(c) << ": rank " << r << ", step " << s + 1;
    }
  }
  // The slow momentum moved the models away from plain local SGD (or the test would not see β, α).
  const auto plain = reference({c.per_node, c.memory_efficient, 0.0, 1.0});
  EXPECT_GT(relative_difference(expected[0].back(), plain[0].back()), 1e-3) << describe(c);
}

INSTANTIATE_TEST_SUITE_P(NodesAndShards, SlowMoFormula,
                         ::testing::Values(Config{1, true}, Config{1, false}, Config{2, true}, Config{2, false},
                                           Config{2, true, 0.3, 0.7}, Config{4, true},
                                           // fewer shards than ranks: ranks 2, 3 (or 3) hold none
                                           Config{1, true, 0.5, 1.0, 2}, Config{2, true, 0.5, 1.0, 3}));

// On one node every rank holds the same model after the first step, so every layout takes the same
// x_old (with several nodes each shard's x_old is its owner's: Note [x_old after the first step]).
TEST(SlowMo, MemoryEfficientShardsAreBitwiseEqualToWholeBuffersAndTakeAQuarterOfTheirBytes) {
  for (const int64_t per_node : {kRanks}) {
    const auto sharded = train_slowmo({per_node, true});
    const auto whole = train_slowmo({per_node, false});
    for (int64_t r = 0; r < kRanks; ++r) {
      for (int64_t s = 0; s < kSteps; ++s) {
        ASSERT_TRUE(torch::equal(sharded[static_cast<size_t>(r)].steps[static_cast<size_t>(s)].parameters,
                                 whole[static_cast<size_t>(r)].steps[static_cast<size_t>(s)].parameters))
            << "nprocs_per_node=" << per_node << ": rank " << r << ", step " << s + 1;
      }
      const int64_t parameters = whole[0].steps[0].parameters.numel();
      EXPECT_EQ(whole[static_cast<size_t>(r)].buffer_bytes, 2 * parameters * 4) << "rank " << r;
      // 4 shards of ceil(parameters / 4) elements; the last one may be shorter.
      const int64_t shard = (parameters + kRanks - 1) / kRanks;
      const int64_t mine = std::min(parameters, (r + 1) * shard) - std::min(parameters, r * shard);
      EXPECT_EQ(sharded[static_cast<size_t>(r)].buffer_bytes, 2 * mine * 4) << "rank " << r;
    }
  }
}

TEST(SlowMo, WithoutSlowMomentumItIsLocalSGDWithPeriodicAveraging) {
  const auto slowmo = train_slowmo({2, true, 0.0, 1.0});
  // PyTorch's PeriodicModelAverager over the world averages at s >= warmup with (s - warmup) %
  // period == 0: warmup = period - 1 averages after steps 3, 6, ...
  const auto periodic = train(2, [](Topology& topology, LearningRates) {
    return std::make_unique<PeriodicModelAverager>(topology.world(), kLocalSGD, kLocalSGD - 1);
  });
  for (int64_t r = 0; r < kRanks; ++r) {
    for (int64_t s = 0; s < kSteps; ++s) {
      EXPECT_LE(relative_difference(slowmo[static_cast<size_t>(r)].steps[static_cast<size_t>(s)].parameters,
                                    periodic[static_cast<size_t>(r)].steps[static_cast<size_t>(s)].parameters),
                1e-6)
          << "rank " << r << ", step " << s + 1;
    }
    EXPECT_EQ(slowmo[static_cast<size_t>(r)].buffer_bytes, 0) << "no slow momentum, no buffers";
  }
  // And the models of the two nodes differ between averages (local SGD), agree right after one.
  EXPECT_FALSE(torch::equal(slowmo[0].steps[0].parameters, slowmo[2].steps[0].parameters));
  EXPECT_TRUE(torch::equal(slowmo[0].steps[2].parameters, slowmo[2].steps[2].parameters));
  EXPECT_TRUE(torch::equal(slowmo[0].steps[0].parameters, slowmo[1].steps[0].parameters)) << "one node, one model";
}

TEST(SlowMo, WithinTheNodeEveryStepAcrossNodesOnlyAtAveragingSteps) {
  const auto runs = train_slowmo({2, true});
  const int64_t model_bytes = runs[0].steps[0].parameters.numel() * 4;
  for (int64_t r = 0; r < kRanks; ++r) {
    const bool leader = r % 2 == 0;
    for (int64_t s = 0; s < kSteps; ++s) {
      const auto& step = runs[static_cast<size_t>(r)].steps[static_cast<size_t>(s)];
      const bool averages = (s + 1) % kLocalSGD == 0, slow = (s + 1) % kSlowMo == 0;
      const std::string where = "rank " + std::to_string(r) + ", step " + std::to_string(s + 1);
      // The gradients within the node every step, plus the leader's broadcast of the average (the
      // first two steps also rebuild the reducer's buckets).
      if (s > 1) {
        EXPECT_EQ(step.node_bytes, model_bytes * (averages ? 2 : 1)) << where;
      }
      EXPECT_GE(step.node_bytes, model_bytes) << where;
      EXPECT_EQ(step.leaders_bytes, leader && averages ? model_bytes : 0) << where;
      // The world only carries the all-gather of the shards at the slow momentum step: each rank
      // its own, a quarter of the model (212 parameters: 53 each).
      EXPECT_EQ(step.world_bytes, slow ? model_bytes / kRanks : 0) << where;
    }
  }
}

TEST(SlowMo, TheAveragersStateResumesBitwise) {
  for (const bool memory_efficient : {true, false}) {
    const Config c{2, memory_efficient};
    const auto whole = train_slowmo(c);
    const auto resumed = train_slowmo(c, /*interrupt_at=*/7);  // between averages, before the first slow step
    for (int64_t r = 0; r < kRanks; ++r) {
      EXPECT_TRUE(torch::equal(whole[static_cast<size_t>(r)].steps.back().parameters,
                               resumed[static_cast<size_t>(r)].steps.back().parameters))
          << "memory_efficient=" << memory_efficient << ", rank " << r;
    }
  }
}

using testing::construct_quiet_trainer;

std::string trainer_error(const std::string& strategy, int64_t devices) {
  return testing::trainer_construction_error(strategy, devices);
}

// Issue 34.5: the refusals that need parameters and learning rates, on two ranks: the buffers are
// one flat tensor (one dtype), and the slow momentum step divides by each learning rate.
TEST(SlowMo, RefusesParametersOfTwoDtypesAndALearningRateOfZeroAtItsSlowMomentumStep) {
  std::vector<std::string> dtype_errors(2), rate_errors(2);
  const auto errors = testing::run_thread_ranks(2, [&](int64_t rank, int64_t port) {
    auto world = Communicator::connect(testing::loopback_options(rank, 2, port));
    auto topology = Topology::build(world, {.global_rank = rank, .world_size = 2, .local_rank = rank,
                                            .local_world_size = 2}, 1);
    const SlowMomentumOptions options{.slowmo_frequency = 1, .localsgd_frequency = 1};
    SlowMomentumAverager mixed(*topology, options, [] { return std::vector<double>(2, 0.1); });
    const std::vector<torch::Tensor> two_dtypes{torch::zeros({3}), torch::zeros({2}, torch::kDouble)};
    dtype_errors[static_cast<size_t>(rank)] = testing::configuration_error_of([&] { mixed.check_parameters(two_dtypes); });
    SlowMomentumAverager zero_rate(*topology, options, [] { return std::vector<double>(1, 0.0); });
    const std::vector<torch::Tensor> parameters{torch::ones({4})};
    rate_errors[static_cast<size_t>(rank)] =
        testing::configuration_error_of([&] { zero_rate.average_parameters(parameters); });
  });
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    EXPECT_NE(dtype_errors[r].find("needs one dtype; got Float and Double"), std::string::npos) << dtype_errors[r];
    EXPECT_NE(rate_errors[r].find("divides by the learning rate, which is 0 for parameter 0"), std::string::npos)
        << rate_errors[r];
  }
}

TEST(SlowMo, OptionsByNameAndTheirErrorsAtTrainerConstruction) {
  auto strategy = std::dynamic_pointer_cast<SlowMoStrategy>(strategy_registry().create("slowmo"));
  ASSERT_NE(strategy, nullptr);
  const auto& defaults = strategy->slowmo_options();  // fairscale's defaults
  EXPECT_EQ(defaults.slowmo_momentum, 0.5);
  EXPECT_EQ(defaults.slowmo_lr, 1.0);
  EXPECT_EQ(defaults.slowmo_frequency, 48);
  EXPECT_EQ(defaults.localsgd_frequency, 3);
  EXPECT_FALSE(defaults.nprocs_per_node.has_value());
  EXPECT_TRUE(defaults.memory_efficient);
  EXPECT_EQ(defaults.num_shards, 32);
  EXPECT_TRUE(defaults.broadcast_buffers);
  strategy = std::dynamic_pointer_cast<SlowMoStrategy>(strategy_registry().create(
      "slowmo:slowmo_momentum=0.2,slowmo_lr=0.9,slowmo_frequency=12,localsgd_frequency=4,nprocs_per_node=2,"
      "slowmo_memory_efficient=false,slowmo_num_shards=8,broadcast_buffers=false,bucket_cap_mb=5,"
      "find_unused_parameters=true"));
  ASSERT_NE(strategy, nullptr);
  const auto& set = strategy->slowmo_options();
  EXPECT_EQ(set.slowmo_momentum, 0.2);
  EXPECT_EQ(set.slowmo_lr, 0.9);
  EXPECT_EQ(set.slowmo_frequency, 12);
  EXPECT_EQ(set.localsgd_frequency, 4);
  EXPECT_EQ(set.nprocs_per_node, 2);
  EXPECT_FALSE(set.memory_efficient);
  EXPECT_EQ(set.num_shards, 8);
  EXPECT_FALSE(set.broadcast_buffers);
  EXPECT_EQ(strategy->options().bucket_cap_mb, 5.0);
  EXPECT_TRUE(strategy->options().find_unused_parameters);
  EXPECT_FALSE(strategy->options().broadcast_buffers);

  EXPECT_NE(trainer_error("slowmo:slowmo_frequency=10", 2)
                .find("expected slowmo_frequency a multiple of localsgd_frequency"),
            std::string::npos);
  EXPECT_NE(trainer_error("slowmo:nprocs_per_node=3", 4)
                .find("expected a world size divisible by nprocs_per_node=3, got 4 processes"),
            std::string::npos);
  EXPECT_NE(trainer_error("slowmo:slowmo_momentum=1", 2).find("expected slowmo_momentum in [0, 1), got 1"),
            std::string::npos);
  EXPECT_NE(trainer_error("slowmo:slowmo_lr=0", 2).find("option 'slowmo_lr' expects a value > 0, got 0"),
            std::string::npos);
  EXPECT_NE(trainer_error("slowmo:localsgd_frequency=0", 2).find("localsgd_frequency"), std::string::npos);
  EXPECT_NE(trainer_error("slowmo:slowmo_freq=12", 2).find("slowmo_frequency"), std::string::npos)
      << "an unknown key suggests the closest";
  EXPECT_NE(testing::configuration_error_of([] { construct_quiet_trainer("slowmo", 2, "bf16-true"); })
                .find("loses the slow momentum update; use 32-true or a mixed precision"),
            std::string::npos);
  // Plain local SGD (no slow momentum): no buffers to lose.
  EXPECT_NO_THROW(construct_quiet_trainer("slowmo:slowmo_momentum=0", 2, "bf16-true"));
  EXPECT_NO_THROW(construct_quiet_trainer("slowmo:nprocs_per_node=2,slowmo_frequency=6,localsgd_frequency=3", 4));
}

}  // namespace
}  // namespace volt::averaging::slowmo_tests

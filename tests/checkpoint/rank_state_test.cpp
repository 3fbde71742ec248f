// Per-rank state in a full checkpoint: gather_from_ranks hands every rank every rank's tensor bit
// for bit (ranks as threads over an in-process all_reduce), and a resumed rank continues from its
// own random state.
#include <condition_variable>
#include <mutex>
#include <thread>
#include <tuple>

#include "strategies/single_device_strategy.h"
#include "tests/support/test_doubles.h"
#include "tests/checkpoint/checkpoint_test_support.h"
#include "strategies/rank_gather.h"

namespace volt::testing {
namespace {

// Sums what every thread contributes, like an all_reduce over `world` ranks.
class Exchange {
 public:
  explicit Exchange(int64_t world) : world_(world) {}
  torch::Tensor sum(const torch::Tensor& value) {
    std::unique_lock<std::mutex> lock(mutex_);
    const int64_t generation = generation_;
    total_ = arrived_ == 0 ? value.clone() : total_ + value;
    if (++arrived_ == world_) {
      result_ = total_;
      arrived_ = 0;
      ++generation_;
      done_.notify_all();
    } else {
      done_.wait(lock, [&] { return generation_ != generation; });
    }
    return result_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_;
  int64_t world_, arrived_ = 0, generation_ = 0;
  torch::Tensor total_, result_;
};

// A rank of an in-process data-parallel run: collectives go through `exchange`, and gradients
// are averaged over ranks before each optimizer step (what DDP does at a window's end), so the
// ranks' weights stay equal while their gradients inside a window differ.
class FakeRankStrategy : public SingleDeviceStrategy {
 public:
  FakeRankStrategy(int64_t rank, int64_t world, Exchange* exchange = nullptr)
      : world_(world), exchange_(exchange) {
    hold(std::make_shared<Collectives>(rank, world, exchange));
  }
  bool optimizer_step(torch::optim::Optimizer& optimizer,
                      const std::function<void(torch::optim::Optimizer&)>& before_step) override {
    std::vector<torch::Tensor> grads, params;
    if (exchange_ != nullptr) {
      for (auto& group : optimizer.param_groups()) {
        for (auto& p : group.params()) {
          p.mutable_grad() = exchange_->sum(p.grad()) / static_cast<double>(world_);
          grads.push_back(p.grad().flatten().clone());
        }
      }
    }
    const bool stepped = SingleDeviceStrategy::optimizer_step(optimizer, before_step);
    for (auto& group : optimizer.param_groups()) {
      for (auto& p : group.params()) params.push_back(p.detach().flatten().clone());
    }
    if (!grads.empty()) steps.push_back({torch::cat(grads), torch::cat(params)});
    return stepped;
  }

  // Each step's averaged gradients and the parameters after it, to name the first step at which
  // two ranks that should agree do not.
  struct Step {
    torch::Tensor gradients, parameters;
  };
  std::vector<Step> steps;

 private:
  struct Collectives : FakeRankCollectives {
    Collectives(int64_t rank, int64_t world, Exchange* exchange) : FakeRankCollectives(rank, world), exchange(exchange) {}
    torch::Tensor all_reduce(const torch::Tensor& value, ReduceOp op) override {
      if (exchange == nullptr) return value;
      EXPECT_EQ(op, ReduceOp::Sum);
      return exchange->sum(value);
    }
    Exchange* exchange;
  };
  int64_t world_;
  Exchange* exchange_;
};

TEST(RankGather, EveryRankGetsEveryRanksTensorBitForBit) {
  constexpr int64_t kWorld = 3;
  Exchange exchange(kWorld);
  // Values a float sum would not carry through unchanged: -0, NaN, infinity, a denormal.
  auto tensor_of = [](int64_t rank) {
    return torch::tensor({-0.0f, std::nanf(""), INFINITY, 1e-42f, static_cast<float>(rank) + 0.25f}).reshape({5, 1});
  };
  std::vector<std::vector<torch::Tensor>> gathered(kWorld);
  std::vector<std::thread> ranks;
  for (int64_t r = 0; r < kWorld; ++r) {
    ranks.emplace_back([&, r] {
      FakeRankStrategy strategy(r, kWorld, &exchange);
      gathered[r] = gather_from_ranks(strategy.collectives(), tensor_of(r));
    });
  }
  for (auto& rank : ranks) rank.join();
  for (int64_t r = 0; r < kWorld; ++r) {
    ASSERT_EQ(gathered[r].size(), static_cast<size_t>(kWorld));
    for (int64_t s = 0; s < kWorld; ++s) {
      EXPECT_EQ(gathered[r][s].sizes(), tensor_of(s).sizes());
      EXPECT_TRUE(torch::equal(gathered[r][s].view(torch::kInt32), tensor_of(s).view(torch::kInt32)))
          << "rank " << r << " got other bytes for rank " << s;
    }
  }
}

// Records the CPU generator's state when the first training step starts.
class RngProbe : public RegressionModule {
 public:
  torch::Tensor training_step(const Batch& batch, int64_t batch_idx) override {
    if (!first_state.defined()) first_state = at::detail::getDefaultCPUGenerator().get_state();
    return RegressionModule::training_step(batch, batch_idx);
  }
  torch::Tensor first_state;
};

torch::Tensor generator_state_after_seed(uint64_t seed) {
  auto generator = at::detail::createCPUGenerator(seed);
  return generator.get_state();
}

TEST(RankState, AResumedRankContinuesFromItsOwnRandomState) {
  TemporaryDirectory dir;
  const auto path = dir.file("two_ranks.ckpt");
  {
    auto options = quiet_options(dir.path());
    options.max_epochs = 1;
    Trainer trainer(options);
    trainer.fit(std::make_shared<RegressionModule>(), std::make_shared<RegressionData>(32, 8));
    trainer.save_checkpoint(path);
  }
  // As a two-rank run would have written it.
  CheckpointIO io;
  auto checkpoint = io.load(path);
  c10::impl::GenericList per_rank(c10::AnyType::get());
  for (uint64_t seed : {100, 200}) {
    StateDict entry;
    entry.set("torch", generator_state_after_seed(seed));
    per_rank.push_back(entry.to_ivalue());
  }
  checkpoint.set("rng_states_per_rank", per_rank);
  io.save(checkpoint, path);

  for (int64_t rank : {0, 1}) {
    auto options = quiet_options(dir.path());
    options.max_epochs = 2;
    Trainer trainer(options, std::make_shared<FakeRankStrategy>(rank, 2));
    auto probe = std::make_shared<RngProbe>();
    trainer.fit(probe, std::make_shared<RegressionData>(32, 8), path);
    ASSERT_TRUE(probe->first_state.defined());
    EXPECT_TRUE(torch::equal(probe->first_state, generator_state_after_seed(rank == 0 ? 100 : 200))) << "rank " << rank;
  }
}

// The first step after which rank 0's and rank 1's averaged gradients or parameters differ, said
// in words ("" when they agree throughout).
std::string first_disagreement(const std::vector<FakeRankStrategy::Step>& rank0,
                               const std::vector<FakeRankStrategy::Step>& rank1) {
  if (rank0.size() != rank1.size()) {
    return "rank 0 took " + std::to_string(rank0.size()) + " steps, rank 1 " + std::to_string(rank1.size());
  }
  for (size_t step = 0; step < rank0.size(); ++step) {
    for (const auto& [what, a, b] : {std::tuple{"averaged gradients", rank0[step].gradients, rank1[step].gradients},
                                     std::tuple{"parameters after the step", rank0[step].parameters,
                                                rank1[step].parameters}}) {
      if (!torch::equal(a, b)) {
        return std::string(what) + " differ at step " + std::to_string(step) + ": max difference " +
               std::to_string((a - b).abs().max().item<double>());
      }
    }
  }
  return "";
}

// Two ranks as threads, 3 micro-batches per window, a full checkpoint written after the second
// micro-batch of a window: each rank must get its own accumulated gradients back.
std::vector<torch::Tensor> fit_two_ranks(const std::string& root, const std::string& save_to,
                                         const std::string& ckpt_path) {
  constexpr int64_t kWorld = 2;
  Exchange exchange(kWorld);
  std::vector<std::shared_ptr<RegressionModule>> models;
  for (int64_t r = 0; r < kWorld; ++r) {
    torch::manual_seed(7);  // equal initial weights on every rank, as after DDP's broadcast
    models.push_back(std::make_shared<RegressionModule>(RegressionOptions{.adam = true}));
  }
  EXPECT_TRUE(torch::equal(models[0]->flat_parameters(), models[1]->flat_parameters())) << "initial weights";
  std::vector<std::shared_ptr<FakeRankStrategy>> strategies;
  for (int64_t r = 0; r < kWorld; ++r) strategies.push_back(std::make_shared<FakeRankStrategy>(r, kWorld, &exchange));
  std::vector<std::thread> ranks;
  for (int64_t r = 0; r < kWorld; ++r) {
    ranks.emplace_back([&, r] {
      auto options = quiet_options(root);
      options.max_epochs = 2;
      options.accumulate_grad_batches = 3;
      Trainer trainer(options, strategies[r]);
      if (!save_to.empty()) trainer.add_callback(std::make_shared<SaveAndInterrupt>(save_to, SavePoint::TrainBatchEnd, 0, 4));
      try {
        trainer.fit(models[r], std::make_shared<RegressionData>(96, 4, /*shuffle=*/true, 5), ckpt_path);
      } catch (const Interrupted&) {
      }
    });
  }
  for (auto& rank : ranks) rank.join();
  EXPECT_EQ(first_disagreement(strategies[0]->steps, strategies[1]->steps), "");
  std::vector<torch::Tensor> weights;
  for (const auto& model : models) weights.push_back(model->flat_parameters());
  return weights;
}

TEST(RankState, EachRankResumesWithItsOwnGradientsOfAnOpenWindow) {
  TemporaryDirectory dir;
  const auto reference = fit_two_ranks(dir.path(), "", "");
  ASSERT_TRUE(torch::equal(reference[0], reference[1]));
  fit_two_ranks(dir.path(), dir.file("window.ckpt"), "");
  const auto checkpoint = CheckpointIO().load(dir.file("window.ckpt"));
  const auto fit_loop = checkpoint.child("loops").child("fit_loop");
  ASSERT_EQ(fit_loop.get_int("window_micro_batches"), 2);
  ASSERT_TRUE(fit_loop.contains("accumulated_grads_per_rank"));
  const auto resumed = fit_two_ranks(dir.path(), "", dir.file("window.ckpt"));
  for (size_t r = 0; r < resumed.size(); ++r) {
    EXPECT_TRUE(torch::equal(resumed[r], reference[r]))
        << "rank " << r << ": max difference " << (resumed[r] - reference[r]).abs().max().item<double>();
  }
}

}  // namespace
}  // namespace volt::testing

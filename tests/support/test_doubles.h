#pragma once
// Modules and strategies that script what a callback or logger sees: a metric's value per epoch,
// a minimum time per step, another rank, rank 0's decision.
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "strategies/single_device_strategy.h"
#include "tests/support/regression_problem.h"

namespace volt::testing {

// Validation logs `metric` = script[epoch] (the last entry repeats).
class ScriptedModule : public RegressionModule {
 public:
  explicit ScriptedModule(std::vector<double> script, std::string metric = "score")
      : script_(std::move(script)), metric_(std::move(metric)) {}
  void validation_step(const Batch&, int64_t) override {
    log(metric_, script_[std::min(static_cast<size_t>(current_epoch()), script_.size() - 1)]);
  }

 private:
  std::vector<double> script_;
  std::string metric_;
};

// Each training step sleeps `pause` first, so that training time passes at a known minimum rate.
class SlowModule : public RegressionModule {
 public:
  explicit SlowModule(std::chrono::milliseconds pause) : pause_(pause) {}
  torch::Tensor training_step(const Batch& batch, int64_t batch_idx) override {
    std::this_thread::sleep_for(pause_);
    return RegressionModule::training_step(batch, batch_idx);
  }

 private:
  std::chrono::milliseconds pause_;
};

// One process's identity collectives claiming to be rank `rank` of `world` (no communication
// happens in these single-process runs).
class FakeRankCollectives : public StrategyCollectives {
 public:
  FakeRankCollectives(int64_t rank, int64_t world) : rank_(rank), world_(world) {}
  ProcessTopology topology() const override { return {.global_rank = rank_, .world_size = world_}; }

 private:
  int64_t rank_, world_;
};

// Pretends to be rank 1 of 2.
class SecondRankStrategy : public SingleDeviceStrategy {
 public:
  SecondRankStrategy() { hold(std::make_shared<FakeRankCollectives>(1, 2)); }
};

// A strategy whose rank 0 always decides `rank0_decision`, whatever this rank wanted; counts the
// broadcasts.
class FixedDecisionStrategy : public SingleDeviceStrategy {
 public:
  explicit FixedDecisionStrategy(bool rank0_decision) : decisions_(std::make_shared<Decisions>(rank0_decision)) {
    hold(decisions_);
  }
  int calls() const { return decisions_->calls; }

 private:
  struct Decisions : StrategyCollectives {
    explicit Decisions(bool decision) : decision(decision) {}
    bool broadcast_decision(bool, std::source_location = std::source_location::current()) override {
      ++calls;
      return decision;
    }
    bool decision;
    int calls = 0;
  };
  std::shared_ptr<Decisions> decisions_;
};

}  // namespace volt::testing

#pragma once
// Lightning's `dp` in miniature, registered like a user's own strategy to prove the multi-device
// seam (Note [Minimal strategy], docs/architecture.md): one process drives every device of its
// node (Placement::devices_per_process), with one replica of the model per device. A training
// batch is split over the replicas by rows r, r + k, r + 2k, ... (the samples DDP's rank r gets
// from DistributedSampler without shuffling), each replica's step runs on its rows, the loss is
// the replicas' mean, and after backward the replicas' gradients are added to the module's, which
// the optimizer steps: g0/k + g1/k + ..., what DDP's all-reduce computes. Before each training
// forward the replicas take the module's parameters and buffers. Evaluation runs on the module.
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <vector>

#include "strategies/strategy.h"

namespace volt::testing {

class ReplicaStrategy : public Strategy {
 public:
  using ReplicaFactory = std::function<std::shared_ptr<torch::nn::Module>()>;

  explicit ReplicaStrategy(ReplicaFactory make_replica) : make_replica_(std::move(make_replica)) {
    hold(std::make_shared<AllDevices>(*this));
    hold(std::make_shared<SummedReplicaGradients>(*this));
  }
  std::string name() const override { return "test_replicas"; }

  torch::Tensor run_step(RunningStage stage, torch::nn::Module& module, const Batch& batch,
                         const StepFunction& step) override {
    if (stage != RunningStage::Training || replicas_.empty()) return Strategy::run_step(stage, module, batch, step);
    copy_module_into_replicas();
    auto context = forward_scope(stage);
    const auto k = static_cast<int64_t>(replicas_.size()) + 1;
    torch::Tensor sum;
    for (int64_t r = 0; r < k; ++r) {
      const auto rows = torch::arange(r, batch.size(), k, torch::kLong);
      const auto device = environment().devices.at(static_cast<size_t>(r));
      torch::nn::Module& replica = r == 0 ? module : *replicas_[static_cast<size_t>(r - 1)];
      const auto loss = step(replica, rows_of(batch, rows).to(device));
      if (!loss.defined()) return loss;  // no backward this step: nothing to combine
      sum = sum.defined() ? sum + loss.to(root_device()) : loss;
    }
    return sum / static_cast<double>(k);
  }

 protected:
  void wrap_module(torch::nn::Module& module) override {
    module_ = &module;
    replicas_.clear();
    // Building a replica draws initial weights: keep the run's random numbers the same as DDP's.
    auto generator = at::globalContext().defaultGenerator(torch::kCPU);
    const auto state = generator.get_state();
    for (size_t d = 1; d < environment().devices.size(); ++d) {
      auto replica = make_replica_();
      precision().convert_module(*replica);
      replica->to(environment().devices[d]);
      replicas_.push_back(std::move(replica));
    }
    generator.set_state(state);
  }

 private:
  // Every device of the node in this one process.
  class AllDevices : public Placement {
   public:
    using Placement::Placement;
    int64_t devices_per_process(int64_t devices_per_node) const override { return devices_per_node; }
  };

  class SummedReplicaGradients : public GradientSynchronization {
   public:
    explicit SummedReplicaGradients(ReplicaStrategy& owner) : GradientSynchronization(owner), strategy_(owner) {}
    void post_backward(const torch::Tensor&) override {
      torch::NoGradGuard no_grad;
      const auto mine = strategy_.module_->parameters();
      for (const auto& replica : strategy_.replicas_) {
        const auto theirs = replica->parameters();
        for (size_t i = 0; i < mine.size(); ++i) {
          auto grad = theirs[i].grad();
          if (!grad.defined()) continue;
          auto& target = mine[i].mutable_grad();
          if (target.defined()) {
            target.add_(grad.to(target.device()));
          } else {
            target = grad.to(mine[i].device(), /*non_blocking=*/false, /*copy=*/true);
          }
          theirs[i].mutable_grad().reset();
        }
      }
    }

   private:
    ReplicaStrategy& strategy_;
  };

  static Batch rows_of(const Batch& batch, const torch::Tensor& rows) {
    Batch part;
    part.input = batch.input.index_select(0, rows.to(batch.input.device()));
    if (batch.target.defined()) part.target = batch.target.index_select(0, rows.to(batch.target.device()));
    for (const auto& [name, tensor] : batch.extras) part.extras[name] = tensor.index_select(0, rows.to(tensor.device()));
    return part;
  }

  void copy_module_into_replicas() {
    torch::NoGradGuard no_grad;
    const auto parameters = module_->parameters();
    const auto buffers = module_->buffers();
    for (const auto& replica : replicas_) {
      const auto theirs = replica->parameters();
      for (size_t i = 0; i < parameters.size(); ++i) theirs[i].copy_(parameters[i]);
      const auto their_buffers = replica->buffers();
      for (size_t i = 0; i < buffers.size(); ++i) their_buffers[i].copy_(buffers[i]);
    }
  }

  ReplicaFactory make_replica_;
  torch::nn::Module* module_ = nullptr;
  std::vector<std::shared_ptr<torch::nn::Module>> replicas_;
};

}  // namespace volt::testing

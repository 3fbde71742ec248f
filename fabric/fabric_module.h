#pragma once
// The module a Fabric hands back from setup: the user's module, set up by the strategy (through
// the precision, to the device, wrapped), behind a forward that runs inside the strategy's forward
// region (Strategy::forward_scope: the precision's autocast, DDP's buffer broadcast), exactly
// where the Trainer's run_step runs training_step. LibTorch has no forward hooks and no common
// forward signature, so FabricModule<M> keeps M's own: `module->forward(x)` calls M::forward(x).
//
// The user's module is registered as the submodule "module", so that train()/eval(), to() and
// parameters() act on it through the wrapper; its parameters are the very tensors of the user's
// module. Fabric::save and Fabric::load take either and store the user's names (without the
// "module." prefix), the names the Trainer's checkpoints use.
//
// Thread-safety: as the strategy's (one training thread).
#include <torch/torch.h>

#include <memory>
#include <utility>

#include "core/run_stage.h"
#include "core/scope_guard.h"
#include "strategies/strategy.h"

namespace volt {

class FabricModuleBase : public torch::nn::Module {
 public:
  // The user's module, as set up by the strategy.
  torch::nn::Module& inner() const { return *inner_; }

 protected:
  FabricModuleBase(std::shared_ptr<torch::nn::Module> inner, std::shared_ptr<Strategy> strategy)
      : inner_(register_module("module", std::move(inner))), strategy_(std::move(strategy)) {}
  // Held around one forward: the training forward region while the module is in train() mode,
  // the evaluation one otherwise (no collectives: evaluation loaders may be split unevenly).
  ScopeGuard forward_scope() const {
    return strategy_->forward_scope(inner_->is_training() ? RunningStage::Training : RunningStage::Validating);
  }

 private:
  std::shared_ptr<torch::nn::Module> inner_;
  std::shared_ptr<Strategy> strategy_;
};

template <typename M>
class FabricModule : public FabricModuleBase {
 public:
  FabricModule(std::shared_ptr<M> module, std::shared_ptr<Strategy> strategy)
      : FabricModuleBase(module, std::move(strategy)), module_(std::move(module)) {}

  // M::forward(args...) inside the strategy's forward region. [collective in training for
  // strategies that broadcast buffers (ddp, ddp_sharded, slowmo): every rank runs each forward]
  template <typename... Args>
  decltype(auto) forward(Args&&... args) {
    auto scope = forward_scope();
    return module_->forward(std::forward<Args>(args)...);
  }

  M& module() const { return *module_; }

 private:
  std::shared_ptr<M> module_;
};

}  // namespace volt

#include "trainer/optim/manual_optimizer.h"

#include <unordered_set>

#include "trainer/loops/loop_hooks.h"
#include "trainer/module.h"
#include "strategies/strategy.h"

namespace volt {
void require_manual_optimization(const LoopState* state, const Module& module, const std::string& what) {
  check<ConfigurationError>(state != nullptr && state->stage == RunningStage::Training, what,
                            ": only inside training_step (the Trainer is not training this module now)");
  check<ConfigurationError>(!module.automatic_optimization(), what,
                            ": the Trainer runs backward and steps the optimizers in automatic optimization; "
                            "override automatic_optimization() to return false to do it in training_step");
}

ManualOptimizer::ManualOptimizer(const LoopContext& context, std::shared_ptr<torch::optim::Optimizer> optimizer)
    : context_(context), strategy_(context.strategy), state_(context.state), optimizer_(std::move(optimizer)) {}

bool ManualOptimizer::step() {
  require_manual_optimization(&state_, *state_.module, "ManualOptimizer::step");
  const bool stepped = step_optimizer_with_hooks(context_, *state_.module, *optimizer_, nullptr);
  if (!stepped) ++skipped_steps_;
  ++state_.progress.global_step;
  strategy_.after_optimizer_steps(state_.progress.global_step);
  return stepped;
}

void ManualOptimizer::zero_grad() {
  require_manual_optimization(&state_, *state_.module, "ManualOptimizer::zero_grad");
  strategy_.gradients().zero_grad(*optimizer_);
}

ScopeGuard ManualOptimizer::toggle_model(bool sync_grad) {
  require_manual_optimization(&state_, *state_.module, "ManualOptimizer::toggle_model");
  // What an optimizer steps may stand for other tensors that backward reaches (FSDP steps a
  // unit's flat shard, backward reaches the unit's parameters): both are frozen.
  std::unordered_set<const c10::TensorImpl*> own;
  for (const auto& group : optimizer_->param_groups()) {
    for (const auto& p : group.params()) {
      own.insert(p.unsafeGetTensorImpl());
      for (const auto& q : strategy_.module_parameters_of(p)) own.insert(q.unsafeGetTensorImpl());
    }
  }
  std::vector<torch::Tensor> frozen;
  auto freeze = [&](const torch::Tensor& p) {
    if (own.count(p.unsafeGetTensorImpl()) > 0 || !p.requires_grad()) return;
    p.set_requires_grad(false);
    frozen.push_back(p);
  };
  for (const auto& other : state_.optimizers) {
    if (other == optimizer_) continue;
    for (auto& group : other->param_groups()) {
      for (auto& p : group.params()) {
        for (const auto& q : strategy_.module_parameters_of(p)) freeze(q);
        freeze(p);
      }
    }
  }
  auto no_sync = std::make_shared<ScopeGuard>(sync_grad ? ScopeGuard{} : strategy_.gradients().no_sync());
  return ScopeGuard([frozen = std::move(frozen), no_sync]() mutable {
    no_sync.reset();
    for (auto& p : frozen) p.set_requires_grad(true);
  });
}

}  // namespace volt

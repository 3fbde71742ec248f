#include "strategies/strategy.h"

#include "core/error.h"
#include "strategies/checkpoint_files.h"
#include "strategies/dense_gradients.h"
#include "strategies/loaded_checkpoint.h"
#include "strategies/optimizer_sharding.h"

namespace volt {

Strategy::Strategy()
    : collectives_(std::make_shared<StrategyCollectives>()),
      gradients_(std::make_shared<GradientSynchronization>(*this)),
      placement_(std::make_shared<Placement>(*this)),
      checkpointing_(std::make_shared<CheckpointState>(*this)),
      checkpoint_io_(std::make_shared<CheckpointIO>()),
      background_write_(std::make_unique<BackgroundCheckpointWrite>()) {}

Strategy::~Strategy() = default;

namespace {

template <typename Part>
void replace_part(std::shared_ptr<Part>& slot, std::shared_ptr<Part> part) {
  VOLT_INTERNAL_ASSERT(part != nullptr, "Strategy::hold() expects a part, got nullptr");
  slot = std::move(part);
}

}  // namespace

void Strategy::hold(std::shared_ptr<StrategyCollectives> part) { replace_part(collectives_, std::move(part)); }
void Strategy::hold(std::shared_ptr<GradientSynchronization> part) { replace_part(gradients_, std::move(part)); }
void Strategy::hold(std::shared_ptr<Placement> part) { replace_part(placement_, std::move(part)); }
void Strategy::hold(std::shared_ptr<CheckpointState> part) { replace_part(checkpointing_, std::move(part)); }
void Strategy::hold(std::shared_ptr<OptimizerSharding> part) { replace_part(optimizer_sharding_, std::move(part)); }

void Strategy::setup_environment(const StrategyEnvironment& environment) {
  environment_ = environment;
  if (environment_.devices.empty()) environment_.devices = {environment_.device};
}

void Strategy::setup_module(torch::nn::Module& module) {
  if (is_distributed()) refuse_sparse_gradient_modules(module, name());  // Note [Sparse gradients]
  precision().convert_module(module);
  module.to(root_device());
  checkpointed_.reset();
  if (checkpointing_policy_) {
    checkpointed_ = std::make_unique<CheckpointedModules>(module, *checkpointing_policy_,
                                                          "--strategy " + name() + ":activation_checkpointing");
    checkpointing_checked_ = false;
  }
  try {
    wrap_module(module);
  } catch (...) {
    checkpointed_.reset();  // the module may be gone before anything tears this run down
    throw;
  }
}

void Strategy::detach_policies() { checkpointed_.reset(); }

void Strategy::set_activation_checkpointing(std::optional<ModuleSelector> selector) {
  checkpointing_policy_ = std::move(selector);
}

void Strategy::teardown() { detach_policies(); }

void Strategy::check_checkpointing_capturable() const {
  check<NotSupportedError>(!checkpointing_policy_, "--cuda-graph: --strategy ", name(),
                           ":activation_checkpointing recomputes forwards in the backward with the random generators' "
                           "states set from the host, which a replay would not do; drop one of the two");
}

void Strategy::set_precision(std::shared_ptr<Precision> precision) {
  check<ConfigurationError>(precision != nullptr, "Strategy: expected a precision, got nullptr");
  check_precision(*precision);
  precision_ = std::move(precision);
  // The skip decision of a GradScaler is global: any rank's inf skips every rank's step. On one
  // process all_reduce is the identity. Read through this strategy at each call: the collectives
  // part may be replaced after this (setup_environment).
  precision_->set_found_inf_reducer(
      [this](const torch::Tensor& found_inf) { return collectives().all_reduce(found_inf, ReduceOp::Max); });
}

Precision& Strategy::precision() const {
  VOLT_INTERNAL_ASSERT(precision_ != nullptr, "the Trainer sets a precision before using a strategy");
  return *precision_;
}

void Strategy::set_checkpoint_io(std::shared_ptr<CheckpointIO> checkpoint_io) {
  check<ConfigurationError>(checkpoint_io != nullptr,
                            "Strategy::set_checkpoint_io: expected a CheckpointIO, got nullptr");
  check<ConfigurationError>(!background_write_->pending(),
                            "Strategy::set_checkpoint_io: a checkpoint is being written in the background; call "
                            "finish_checkpoint_writes() first");
  checkpoint_io_ = std::move(checkpoint_io);
}

std::map<std::string, double> Strategy::metrics() const {
  return precision_ ? precision_->metrics() : std::map<std::string, double>{};
}

torch::Tensor Strategy::run_step(RunningStage stage, torch::nn::Module& module, const Batch& batch,
                                 const StepFunction& step) {
  auto context = placement_->forward_context(stage);
  return step(module, batch);
}

void Strategy::backward(const torch::Tensor& loss) {
  gradients_->pre_backward(loss);
  precision().backward(loss);
  gradients_->post_backward(loss);
  if (checkpointed_ && !checkpointing_checked_) {
    checkpointing_checked_ = true;
    checkpointed_->check_reached("--strategy " + name() + ":activation_checkpointing");
  }
}

bool Strategy::optimizer_step(torch::optim::Optimizer& optimizer,
                              const std::function<void(torch::optim::Optimizer&)>& before_step) {
  precision().unscale_gradients(optimizer);
  if (before_step) before_step(optimizer);
  return precision().optimizer_step(optimizer);
}

void Strategy::after_optimizer_steps(int64_t global_step) { precision().update(); }

void Strategy::check_capturable() const {
  throw NotSupportedError("--cuda-graph: strategy '" + name() +
                          "' is not captured (its step does work on the host that a replay would skip); use "
                          "single_device, or drop --cuda-graph");
}

torch::Tensor Strategy::clip_gradients_norm(torch::optim::Optimizer& optimizer, double max_norm, double norm_type) {
  precision().unscale_gradients(optimizer);  // once per step: inside optimizer_step it already ran
  return gradients_->clip_norm(optimizer, max_norm, norm_type);
}

void Strategy::clip_gradients_value(torch::optim::Optimizer& optimizer, double clip_value) {
  precision().unscale_gradients(optimizer);
  gradients_->clip_value(optimizer, clip_value);
}

void Strategy::save_checkpoint(const StateDict& checkpoint, const std::filesystem::path& path, bool in_background) {
  save_checkpoint_files(*collectives_, *checkpoint_io_, checkpointing_->layout(), checkpoint, path, *background_write_,
                        in_background);
}

LoadedCheckpoint Strategy::load_checkpoint(const std::filesystem::path& path) const {
  finish_checkpoint_writes();
  return load_checkpoint_files(*collectives_, *checkpoint_io_, path, name(), checkpointing_->layout(),
                               checkpointing_->reads_slices(),
                               [this](const StateDict& shard) { return checkpointing_->is_own_layout(shard); });
}

void Strategy::remove_checkpoint(const std::filesystem::path& path) {
  remove_checkpoint_files(*collectives_, *checkpoint_io_, path, *background_write_);
}

void Strategy::finish_checkpoint_writes() const {
  volt::finish_checkpoint_writes(*collectives_, *checkpoint_io_, *background_write_);
}

}  // namespace volt

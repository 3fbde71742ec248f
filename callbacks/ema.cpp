#include "callbacks/ema.h"

#include "core/error.h"
#include "trainer/trainer.h"

namespace volt {
namespace {

std::vector<std::pair<std::string, torch::Tensor>> trainable(Module& module) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) {
    if (p.value().requires_grad()) out.emplace_back(p.key(), p.value());
  }
  return out;
}

torch::ScalarType average_dtype(torch::ScalarType dtype) {
  return dtype == torch::kHalf || dtype == torch::kBFloat16 ? torch::kFloat : dtype;
}

}  // namespace

const OptionSchema<EMAOptions>& EMAOptions::schema() {
  static const auto schema =
      OptionSchema<EMAOptions>("EMA")
          .option("decay", &EMAOptions::decay, "weight of the old average per update", in_range(0.0, 1.0))
          .option("update_every_n_steps", &EMAOptions::update_every_n_steps, "optimizer steps between updates",
                  at_least(1))
          .option("validate_with_ema", &EMAOptions::validate_with_ema, "validate with the averaged weights")
          .option("apply_at_end", &EMAOptions::apply_at_end, "leave the averaged weights in the module after fit");
  return schema;
}

EMA::EMA(EMAOptions options) {
  options.validate();
  decay_ = options.decay;
  update_every_n_steps_ = options.update_every_n_steps;
  validate_with_ema_ = options.validate_with_ema;
  apply_at_end_ = options.apply_at_end;
}

EMA::EMA(double decay, int64_t update_every_n_steps, bool validate_with_ema, bool apply_at_end)
    : EMA(EMAOptions{decay, update_every_n_steps, validate_with_ema, apply_at_end}) {}

std::map<std::string, torch::Tensor> EMA::averages() const {
  std::map<std::string, torch::Tensor> out;
  for (size_t i = 0; i < average_.size(); ++i) out[names_[i]] = average_[i];
  return out;
}

StateDict EMA::state_dict() const {
  StateDict averages;
  for (size_t i = 0; i < average_.size(); ++i) averages.set(names_[i], average_[i]);
  StateDict state;
  state.set("decay", decay_);
  state.set("num_updates", num_updates_);
  state.set("averages", averages);
  return state;
}

void EMA::load_state_dict(const StateDict& state) {
  num_updates_ = state.at("num_updates").toInt();
  const StateDict averages = state.child("averages");
  names_ = averages.keys();
  average_.clear();
  for (const auto& name : names_) average_.push_back(averages.at(name).toTensor());
}

void EMA::update(Module& module) {
  torch::NoGradGuard no_grad;
  const auto params = trainable(module);
  if (average_.empty()) {
    for (const auto& [name, p] : params) {
      names_.push_back(name);
      average_.push_back(p.detach().to(average_dtype(p.scalar_type()), /*non_blocking=*/false, /*copy=*/true));
    }
  } else {
    check<ConfigurationError>(params.size() == average_.size(), "EMA: the module has ", params.size(),
                              " trainable parameters but the average holds ", average_.size(),
                              "; freezing or adding parameters during fit is not supported with EMA");
    for (size_t i = 0; i < params.size(); ++i) {
      auto& average = average_[i];
      if (average.device() != params[i].second.device()) average = average.to(params[i].second.device());
      average.mul_(decay_).add_(params[i].second.detach().to(average.scalar_type()), 1.0 - decay_);
    }
  }
  ++num_updates_;
}

void EMA::on_train_start(Trainer& trainer, Module&) {
  // A resumed fit has already averaged the steps before its checkpoint.
  last_step_seen_ = trainer.global_step();
}

void EMA::on_train_batch_end(Trainer& trainer, Module& module, const torch::Tensor&, const Batch&, int64_t) {
  const int64_t step = trainer.global_step();
  if (step == last_step_seen_) return;  // no optimizer step in this batch
  last_step_seen_ = step;
  if (step > 0 && step % update_every_n_steps_ == 0) update(module);
}

void EMA::copy_average_into(Module& module) {
  torch::NoGradGuard no_grad;
  const auto params = trainable(module);
  check<ConfigurationError>(params.size() == average_.size(), "EMA: the module has ", params.size(),
                            " trainable parameters but the average holds ", average_.size());
  for (size_t i = 0; i < params.size(); ++i) params[i].second.copy_(average_[i]);
}

void EMA::on_validation_start(Trainer& trainer, Module& module) {
  if (!validate_with_ema_ || average_.empty() || trainer.fn() != TrainerFn::Fitting) return;
  torch::NoGradGuard no_grad;
  trained_backup_.clear();
  for (const auto& [name, p] : trainable(module)) trained_backup_.push_back(p.detach().clone());
  copy_average_into(module);
}

void EMA::restore_trained_weights(Module& module) {
  if (trained_backup_.empty()) return;
  torch::NoGradGuard no_grad;
  const auto params = trainable(module);
  for (size_t i = 0; i < params.size() && i < trained_backup_.size(); ++i) params[i].second.copy_(trained_backup_[i]);
  trained_backup_.clear();
}

void EMA::on_validation_end(Trainer&, Module& module) { restore_trained_weights(module); }

void EMA::on_exception(Trainer&, Module& module, const std::exception&) { restore_trained_weights(module); }

void EMA::on_train_end(Trainer&, Module& module) {
  if (apply_at_end_ && !average_.empty()) copy_average_into(module);
}

}  // namespace volt

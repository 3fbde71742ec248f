#include "trainer/module.h"

#include "trainer/loops/loop_state.h"
#include "trainer/trainer.h"

namespace volt {

void Module::validation_step(const Batch&, int64_t) {
  throw StepNotDefined("Module: validation_step is not defined");
}

void Module::test_step(const Batch&, int64_t) {
  throw StepNotDefined("Module: test_step is not defined; override it to run Trainer::test");
}

torch::Tensor Module::predict_step(const Batch&, int64_t) {
  throw StepNotDefined("Module: predict_step is not defined; override it to run Trainer::predict");
}

const Trainer& Module::trainer() const {
  check<ConfigurationError>(trainer_ != nullptr,
                            "Module: no Trainer is running this module; call trainer.fit/validate/test first");
  return *trainer_;
}

int64_t Module::current_epoch() const { return trainer_ ? trainer_->current_epoch() : 0; }
int64_t Module::global_step() const { return trainer_ ? trainer_->global_step() : 0; }

void Module::log(const std::string& name, const torch::Tensor& value, const LogOptions& options) {
  check<ConfigurationError>(loop_state_ != nullptr, "log('", name,
                            "'): no Trainer is running this module; log from a step or hook");
  loop_state_->active_collector().log(name, value, options);
}

void Module::log(const std::string& name, double value, const LogOptions& options) {
  log(name, torch::scalar_tensor(value, torch::kDouble), options);
}

}  // namespace volt

#include "strategies/averaging/periodic_model_averager.h"

#include "core/error.h"
#include "strategies/averaging/parameter_mean.h"

namespace volt::averaging {

PeriodicModelAverager::PeriodicModelAverager(Communicator& group, int64_t period, int64_t warmup_steps)
    : ModelAverager(warmup_steps), group_(group), period_(period) {
  check<ConfigurationError>(period >= 1, "periodic model averager: expected a period >= 1, got ", period,
                            "; set model_averaging_period to the number of steps between averages");
}

bool PeriodicModelAverager::averages_at(int64_t step) const {
  return step >= warmup_steps() && (step - warmup_steps()) % period_ == 0;
}

void PeriodicModelAverager::average_parameters(const std::vector<torch::Tensor>& parameters) {
  if (averages_at(step_)) replace_by_mean(parameters, group_);
  ++step_;
}

}  // namespace volt::averaging

#include "strategies/averaging/model_averager.h"

#include "core/error.h"

namespace volt::averaging {

ModelAverager::ModelAverager(int64_t warmup_steps) : warmup_steps_(warmup_steps) {
  check<ConfigurationError>(warmup_steps >= 0, "model averager: expected warmup_steps >= 0, got ", warmup_steps);
}

StateDict ModelAverager::state_dict() const {
  StateDict state;
  state.set("step", step_);
  return state;
}

void ModelAverager::load_state_dict(const StateDict& state) {
  const int64_t step = state.get_int("step");
  check<CheckpointError>(step >= 0, name(), ": expected a step >= 0 in the checkpoint, got ", step);
  step_ = step;
}

}  // namespace volt::averaging

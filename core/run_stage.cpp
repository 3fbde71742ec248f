#include "core/run_stage.h"

namespace volt {

std::string to_string(TrainerFn fn) {
  switch (fn) {
    case TrainerFn::Fitting: return "fit";
    case TrainerFn::Validating: return "validate";
    case TrainerFn::Testing: return "test";
    case TrainerFn::Predicting: return "predict";
  }
  return "?";
}

std::string to_string(RunningStage stage) {
  switch (stage) {
    case RunningStage::None: return "none";
    case RunningStage::Training: return "train";
    case RunningStage::SanityChecking: return "sanity_check";
    case RunningStage::Validating: return "validate";
    case RunningStage::Testing: return "test";
    case RunningStage::Predicting: return "predict";
  }
  return "?";
}

std::string to_string(TrainerStatus status) {
  switch (status) {
    case TrainerStatus::Initializing: return "initializing";
    case TrainerStatus::Running: return "running";
    case TrainerStatus::Finished: return "finished";
    case TrainerStatus::Interrupted: return "interrupted";
  }
  return "?";
}

}  // namespace volt

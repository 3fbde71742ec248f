#pragma once
#include <string>

namespace volt {

// What the user asked the Trainer to do.
enum class TrainerFn { Fitting, Validating, Testing, Predicting };

// Which loop is running right now (the sanity check is a validation run before training).
enum class RunningStage { None, Training, SanityChecking, Validating, Testing, Predicting };

// How a run ended, as reported to loggers' finalize().
enum class TrainerStatus { Initializing, Running, Finished, Interrupted };

std::string to_string(TrainerFn fn);
std::string to_string(RunningStage stage);
std::string to_string(TrainerStatus status);

}  // namespace volt

#pragma once
// What the Trainer's own parts (its loops, checkpoint connector, manual optimizer and Module's
// helpers) may do that callbacks may not: change the strategy (step, synchronize, load state).
// Not for user code: callbacks get Trainer::strategy() read-only and Trainer::collectives().
#include "strategies/strategy.h"
#include "trainer/trainer.h"

namespace volt {

struct TrainerInternals {
  static Strategy& strategy(const Trainer& trainer) { return *trainer.strategy_; }
  // The module a strategy handed a step function (StepFunction): `running` itself, or a replica
  // of it (a strategy that runs several in one process), which is then attached to the same
  // Trainer and loop so that its log() calls count. Throws InternalError for a module that is not
  // a volt::Module.
  static Module& step_module(torch::nn::Module& given, Module& running);
};

}  // namespace volt

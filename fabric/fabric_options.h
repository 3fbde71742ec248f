#pragma once
// What a Fabric can be told: the run's hardware, distribution and reproducibility settings, the
// same struct as the Trainer's (TrainerOptions derives from it), with the same names, defaults and
// checks, and nothing about loops, which the user's own code owns. From the Trainer's command
// line: TrainerOptions::from_args(argc, argv).run_options().
#include "run/run_options.h"

namespace volt {

using FabricOptions = RunOptions;

}  // namespace volt

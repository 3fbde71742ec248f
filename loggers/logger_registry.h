#pragma once
#include "loggers/logger.h"
#include "core/registry.h"

namespace volt {

// Every logger selectable by name (`--logger csv`, `--logger "tensorboard:name=exp"`). Factories
// receive the Trainer's default_root_dir as the `save_dir` option unless the user sets it.
Registry<Logger>& logger_registry();

}  // namespace volt

#include "loggers/logger_registry.h"

#include "loggers/console_logger.h"
#include "loggers/csv_logger.h"
#include "loggers/tensorboard_logger.h"

namespace volt {
namespace {

void register_builtin_loggers(Registry<Logger>& registry) {
  registry.add("csv", "metrics.csv and hparams.yaml under <save_dir>/<name>/version_<N>", CSVLoggerOptions::schema(),
               [](const CSVLoggerOptions& options) { return std::make_shared<CSVLogger>(options); });
  registry.add("tensorboard",
               "TensorBoard event files (scalars, hparams, optional weight histograms) under "
               "<save_dir>/<name>/version_<N>",
               TensorBoardLoggerOptions::schema(),
               [](const TensorBoardLoggerOptions& options) { return std::make_shared<TensorBoardLogger>(options); });
  registry.add("console", "a table of each epoch's metrics on the terminal (rank 0)",
               [] { return std::make_shared<ConsoleLogger>(); });
}

}  // namespace

Registry<Logger>& logger_registry() {
  static Registry<Logger> registry = [] {
    Registry<Logger> r("logger", "--logger");
    register_builtin_loggers(r);
    return r;
  }();
  return registry;
}

}  // namespace volt

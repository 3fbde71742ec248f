#include "loggers/logger_registry.h"

#include "loggers/console_logger.h"
#include "loggers/csv_logger.h"
#include "loggers/tensorboard_logger.h"

namespace volt {
namespace {

void register_builtin_loggers(Registry<Logger>& registry) {
  registry.add("csv", "metrics.csv and hparams.yaml under <save_dir>/<name>/version_<N>",
               {{"save_dir", OptionType::String, ".", "root directory (default: --default-root-dir)"},
                {"name", OptionType::String, "volt_logs", "experiment directory under save_dir"},
                {"version", OptionType::Int, "-1", "version number; -1 picks the next free one"},
                {"flush_every_n_steps", OptionType::Int, "100", "append to metrics.csv every n rows"}},
               [](const OptionValues& o) {
                 return std::make_shared<CSVLogger>(o.get_string("save_dir"), o.get_string("name"),
                                                    o.get_int("version"), o.get_int("flush_every_n_steps"));
               });
  registry.add("tensorboard",
               "TensorBoard event files (scalars, hparams, optional weight histograms) under "
               "<save_dir>/<name>/version_<N>",
               {{"save_dir", OptionType::String, ".", "root directory (default: --default-root-dir)"},
                {"name", OptionType::String, "volt_logs", "experiment directory under save_dir"},
                {"version", OptionType::Int, "-1", "version number; -1 picks the next free one"},
                {"histogram_every_n_epochs", OptionType::Int, "0",
                 "write a histogram of every parameter every n epochs (0: never)"},
                {"histogram_bins", OptionType::Int, "64", "buckets per histogram"}},
               [](const OptionValues& o) {
                 return std::make_shared<TensorBoardLogger>(o.get_string("save_dir"), o.get_string("name"),
                                                            o.get_int("version"),
                                                            o.get_int("histogram_every_n_epochs"),
                                                            o.get_int("histogram_bins"));
               });
  registry.add("console", "a table of each epoch's metrics on the terminal (rank 0)", {},
               [](const OptionValues&) { return std::make_shared<ConsoleLogger>(); });
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

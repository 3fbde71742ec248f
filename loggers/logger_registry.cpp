#include "loggers/logger_registry.h"

#include "loggers/csv_logger.h"

namespace volt {
namespace {

void register_builtin_loggers(Registry<Logger>& registry) {
  registry.add("csv", "metrics.csv and hparams.yaml under <save_dir>/<name>/version_<N>",
               {{"save_dir", OptionType::String, ".", "root directory (default: --default-root-dir)"},
                {"name", OptionType::String, "volt_logs", "experiment directory under save_dir"},
                {"version", OptionType::Int, "-1", "version number; -1 picks the next free one"},
                {"flush_every_n_steps", OptionType::Int, "100", "rewrite metrics.csv every n rows"}},
               [](const OptionValues& o) {
                 return std::make_shared<CSVLogger>(o.get_string("save_dir"), o.get_string("name"),
                                                    o.get_int("version"), o.get_int("flush_every_n_steps"));
               });
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

#include "callbacks/callback_registry.h"

#include "callbacks/model_summary.h"
#include "callbacks/progress_bar.h"

namespace volt {
namespace {

void register_builtin_callbacks(Registry<Callback>& registry) {
  registry.add("progress_bar", "epoch, batch/total, it/s, ETA and prog_bar metrics on rank 0",
               {{"refresh_rate", OptionType::Int, "1", "batches between updates"},
                {"plain", OptionType::Bool, "false", "a line per update even on a terminal"}},
               [](const OptionValues& o) {
                 return std::make_shared<ProgressBar>(o.get_int("refresh_rate"), o.get_bool("plain"));
               });
  registry.add("model_summary", "a table of submodules and parameter counts at fit start",
               {{"max_depth", OptionType::Int, "1", "depth of submodules to list"}},
               [](const OptionValues& o) { return std::make_shared<ModelSummary>(o.get_int("max_depth")); });
}

}  // namespace

Registry<Callback>& callback_registry() {
  static Registry<Callback> registry = [] {
    Registry<Callback> r("callback", "--callback");
    register_builtin_callbacks(r);
    return r;
  }();
  return registry;
}

}  // namespace volt

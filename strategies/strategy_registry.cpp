#include "strategies/strategy_registry.h"

#include "strategies/single_device_strategy.h"

namespace volt {
namespace {

void register_builtin_strategies(Registry<Strategy>& registry) {
  registry.add("single_device", "one process on one device, no communication", {},
               [](const OptionValues&) { return std::make_shared<SingleDeviceStrategy>(); });
  // "auto" picks by the number of processes: one → single_device. Distributed strategies
  // register themselves below as they are built.
  registry.add("auto", "single_device for one process", {},
               [](const OptionValues&) { return std::make_shared<SingleDeviceStrategy>(); });
}

}  // namespace

Registry<Strategy>& strategy_registry() {
  static Registry<Strategy> registry = [] {
    Registry<Strategy> r("strategy", "--strategy");
    register_builtin_strategies(r);
    return r;
  }();
  return registry;
}

}  // namespace volt

#include "strategies/strategy_registry.h"

#include "strategies/ddp/ddp_strategy.h"
#include "strategies/fsdp/fsdp_strategy.h"
#include "strategies/pipeline/pipeline_strategy.h"
#include "strategies/tensor_parallel/tensor_parallel_strategy.h"
#include "strategies/sharded/sharded_ddp_strategy.h"
#include "strategies/single_device_strategy.h"
#include "strategies/slowmo/slowmo_strategy.h"

namespace volt {
namespace {

void register_builtin_strategies(Registry<Strategy>& registry) {
  registry.add("single_device", "one process on one device, no communication", SingleDeviceOptions::schema(),
               [](const SingleDeviceOptions& options) { return std::make_shared<SingleDeviceStrategy>(options); });
  // "auto" picks by the number of processes (create_strategy): one → single_device, several →
  // ddp. Its factory is the one-process case.
  registry.add("auto", "single_device for one process, ddp for several", {},
               [](const OptionValues&) { return std::make_shared<SingleDeviceStrategy>(); });
  register_ddp_strategies(registry);
  register_sharded_strategies(registry);
  register_fsdp_strategy(registry);
  register_slowmo_strategy(registry);
  register_pipeline_strategy(registry);
  register_tensor_parallel_strategy(registry);
}

}  // namespace

void check_strategy_fits(const Strategy& strategy, int64_t world_size, const std::string& origin) {
  check<ConfigurationError>(world_size == 1 || strategy.is_distributed(), "--strategy ", strategy.name(),
                            " runs a single process, but ", world_size, " processes were asked for (", origin,
                            "); choose a distributed strategy (see --list-strategies) or run one process");
  strategy.check_world_size(world_size);
}

NamedSpec parse_strategy_spec(const std::string& text) { return parse_named_spec(text, strategy_registry().flag()); }

bool is_automatic_strategy(const NamedSpec& spec) { return spec.name == "auto"; }

std::shared_ptr<Strategy> create_strategy(const std::string& spec, int64_t world_size, const std::string& origin) {
  return create_strategy(parse_strategy_spec(spec), world_size, origin);
}

std::shared_ptr<Strategy> create_strategy(const NamedSpec& named, int64_t world_size, const std::string& origin) {
  auto& registry = strategy_registry();
  if (is_automatic_strategy(named) && world_size > 1) {
    check<ConfigurationError>(named.values.empty(), "--strategy auto: takes no options, got '",
                              named.values.empty() ? std::string() : named.values.begin()->first,
                              "'; name a strategy to pass options to it");
    check<ConfigurationError>(registry.contains("ddp"), "--strategy auto: ", world_size,
                              " processes (", origin, ") need a distributed strategy, but 'ddp' is not "
                              "registered in this build; pass --strategy with one of: ", [&] {
                                std::string names;
                                for (const auto& n : registry.names()) names += (names.empty() ? "" : ", ") + n;
                                return names;
                              }());
    return registry.create(NamedSpec{.name = "ddp", .values = {}}, OptionContext{});
  }
  auto strategy = registry.create(named, OptionContext{});
  check_strategy_fits(*strategy, world_size, origin);
  return strategy;
}

Registry<Strategy>& strategy_registry() {
  static Registry<Strategy> registry = [] {
    Registry<Strategy> r("strategy", "--strategy");
    register_builtin_strategies(r);
    return r;
  }();
  return registry;
}

}  // namespace volt

#include "strategies/ddp/comm_hook_registry.h"

#include "core/error.h"

namespace volt::ddp {

CommHookSpec::CommHookSpec(std::string name, Make make) : name_(std::move(name)), make_(std::move(make)) {
  check<ConfigurationError>(make_ != nullptr, "comm hook '", name_, "': expected a function that makes the hook, "
                            "got none");
}

std::unique_ptr<CommHook> CommHookSpec::make(Communicator& communicator) const {
  auto hook = make_(communicator);
  check<ConfigurationError>(hook != nullptr, "comm hook '", name_, "': expected its factory to return a hook, got "
                            "nullptr; return std::make_unique<YourHook>(...)");
  return hook;
}

CommHookRegistry& comm_hook_registry() {
  static CommHookRegistry registry = [] {
    CommHookRegistry r("comm hook", "--strategy ddp:comm_hook");
    add_comm_hook(r, "allreduce", "divide by the world size, then sum over the ranks (PyTorch's allreduce_hook)",
                  [](Communicator& communicator) { return std::make_unique<AllReduceHook>(communicator); });
    return r;
  }();
  return registry;
}

void add_comm_hook(CommHookRegistry& registry, const std::string& name, std::string description,
                   CommHookSpec::Make make) {
  registry.add(name, std::move(description), [name, make] { return std::make_shared<CommHookSpec>(name, make); });
}

}  // namespace volt::ddp

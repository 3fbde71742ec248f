#include "strategies/ddp/comm_hook_registry.h"

#include <map>

#include "core/error.h"
#include "strategies/ddp/hooks/compression_wrapper.h"
#include "strategies/ddp/hooks/post_local_sgd_hook.h"
#include "strategies/ddp/hooks/powersgd_hook.h"

namespace volt::ddp {

CommHookSpec::CommHookSpec(std::string name, Make make, CommHookTraits traits)
    : name_(std::move(name)), make_(std::move(make)), traits_(traits) {
  check<ConfigurationError>(make_ != nullptr, "comm hook '", name_, "': expected a function that makes the hook, "
                            "got none");
}

CommHookSpec::CommHookSpec(std::string name, OnTopology on_topology, CommHookTraits traits)
    : name_(std::move(name)), on_topology_(std::move(on_topology)), traits_(traits) {
  check<ConfigurationError>(on_topology_->make != nullptr, "comm hook '", name_, "': expected a function that makes "
                            "the hook, got none");
}

std::unique_ptr<CommHook> CommHookSpec::make(Communicator& communicator, Topology* topology) const {
  std::unique_ptr<CommHook> hook;
  if (on_topology_) {
    check<ConfigurationError>(topology != nullptr, "comm hook '", name_, "' works within process subgroups and "
                              "needs the run's Topology; DDP builds it (--strategy ddp:comm_hook=", name_, ")");
    hook = on_topology_->make(communicator, *topology);
  } else {
    hook = make_(communicator);
  }
  check<ConfigurationError>(hook != nullptr, "comm hook '", name_, "': expected its factory to return a hook, got "
                            "nullptr; return std::make_unique<YourHook>(...)");
  return hook;
}

CommHookRegistry& comm_hook_registry() {
  static CommHookRegistry registry = [] {
    CommHookRegistry r("comm hook", "--strategy ddp:comm_hook");
    add_comm_hook(r, "allreduce", "divide by the world size, then sum over the ranks (PyTorch's allreduce_hook)",
                  [](Communicator& communicator) { return std::make_unique<AllReduceHook>(communicator); });
    for (const auto& [name, dtype, type] : {std::tuple{"fp16_compress", torch::kHalf, "float16"},
                                            std::tuple{"bf16_compress", torch::kBFloat16, "bfloat16"}}) {
      add_comm_hook(r, name,
                    std::string("cast to ") + type +
                        ", divide by the world size, all-reduce, decompress (PyTorch's " + name + "_hook)",
                    [dtype = dtype](Communicator& communicator) {
                      return std::make_unique<CompressionWrapper>(dtype, std::make_unique<AllReduceHook>(communicator));
                    },
                    {.compresses_to_16_bits = true});
    }
    add_comm_hook(r, "noop", "communicate nothing: every rank keeps its own gradients (for measuring)",
                  [](Communicator&) { return std::make_unique<NoOpHook>(); }, {.communicates = false});
    add_comm_hook(r, "powersgd", "PowerSGD low-rank compression per gradient matrix (PyTorch's powerSGD_hook)",
                  PowerSGDOptions::schema(), [](Communicator& communicator, const PowerSGDOptions& options) {
                    return std::make_unique<PowerSGDHook>(communicator, options);
                  },
                  {.multiplies_matrices = true});
    add_comm_hook(r, "batched_powersgd",
                  "PowerSGD on the whole bucket as one square matrix (PyTorch's batched_powerSGD_hook)",
                  PowerSGDOptions::batched_schema(), [](Communicator& communicator, const PowerSGDOptions& options) {
                    return std::make_unique<BatchedPowerSGDHook>(communicator, options);
                  },
                  {.multiplies_matrices = true});
    add_post_local_sgd_hook(r);
    return r;
  }();
  return registry;
}

void add_comm_hook(CommHookRegistry& registry, const std::string& name, std::string description,
                   CommHookSpec::Make make, CommHookTraits traits) {
  registry.add(name, std::move(description),
               [name, make, traits] { return std::make_shared<CommHookSpec>(name, make, traits); });
}

}  // namespace volt::ddp

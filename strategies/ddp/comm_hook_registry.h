#pragma once
// Comm hooks by name: `--strategy "ddp:comm_hook=NAME,<the hook's own keys>"`. DDP's `comm_hook`
// key is extended with this registry (Note [Option extension] in core/option_catalog.h): the keys
// a hook declares are accepted by `ddp` when comm_hook names that hook, checked against the hook's
// declaration, and listed by `--list-strategies` under it. Built in: `allreduce` (the default),
// `fp16_compress`, `bf16_compress`, `noop`, `powersgd`, `batched_powersgd` and `post_local_sgd`
// (strategies/ddp/hooks/).
//
// A hook with keys declares them in an options struct with an OptionSchema and is added with
//   ddp::add_comm_hook(ddp::comm_hook_registry(), "fp16", "compress to float16, all-reduce, decompress",
//                      FP16Options::schema(),
//                      [](Communicator& c, const FP16Options& o) { return std::make_unique<FP16Hook>(c, o); });
// (a built-in: the same call on the registry being built in comm_hook_registry.cpp). Its key names
// must differ from ddp's own. Register before building a Trainer (not thread-safe).
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/option_schema.h"
#include "core/registry.h"
#include "distributed/topology.h"
#include "strategies/averaging/model_averager.h"
#include "strategies/ddp/comm_hook.h"

namespace volt::ddp {

// What DDP checks about a hook when it validates the options around it, declared with the hook
// where it is registered and carried by its spec (the defaults: a hook that all-reduces
// full-precision gradients).
struct CommHookTraits {
  bool communicates = true;            // false: noop (nothing for comm_wrapper to compress)
  bool compresses_to_16_bits = false;  // fp16/bf16_compress: no comm_wrapper around it, no 16-bit precision
  bool multiplies_matrices = false;    // PowerSGD: comm_wrapper=fp16 needs float16 matrix products
  bool steps_locally = false;          // post_local_sgd: ranks' models differ between averages
};

// A comm hook chosen by name with its options, not yet bound to a process group: DDPStrategy
// makes the hook at setup_module, when the communicator exists. Immutable; thread-safe.
//
// A hook that works within process subgroups (post-local-SGD) is made OnTopology: DDP first builds
// the run's Topology (distributed/topology.h, a collective) with the node size the hook asks for,
// then makes the hook over the world and that topology, and runs the model averager that comes
// with it after every optimizer step. Composition: the hook, the averager and DDP stay three
// objects; the spec says which ones a name stands for.
class CommHookSpec {
 public:
  using Make = std::function<std::unique_ptr<CommHook>(Communicator&)>;
  using MakeAverager = std::function<std::unique_ptr<averaging::ModelAverager>(Topology& topology)>;

  struct OnTopology {
    // Processes per "node" of the topology; unset: the cluster's processes per node.
    std::optional<int64_t> node_size;
    // The hook, over the world communicator and the topology (both outlive it).
    std::function<std::unique_ptr<CommHook>(Communicator& world, Topology& topology)> make;
    // The averager DDP runs in after_optimizer_steps; may be empty (no averaging).
    MakeAverager make_averager;
    // Refuses, with a ConfigurationError, a world size the options cannot work with (a group size
    // that does not divide it); DDP calls it at Trainer construction. May be empty.
    std::function<void(int64_t world_size)> check_world_size;
  };

  // `name`: the registered name that chose it. Throws ConfigurationError for an empty `make`.
  CommHookSpec(std::string name, Make make, CommHookTraits traits = {});
  CommHookSpec(std::string name, OnTopology on_topology, CommHookTraits traits = {});
  const std::string& name() const { return name_; }
  const CommHookTraits& traits() const { return traits_; }
  // What a hook on subgroups needs; nullptr for a hook over the world communicator alone.
  const OnTopology* on_topology() const { return on_topology_ ? &*on_topology_ : nullptr; }
  // A new hook over `communicator`, which must outlive it. A hook on_topology() needs `topology`
  // (built over `communicator`); throws ConfigurationError without it.
  std::unique_ptr<CommHook> make(Communicator& communicator, Topology* topology = nullptr) const;

 private:
  std::string name_;
  Make make_;
  std::optional<OnTopology> on_topology_;
  CommHookTraits traits_;
};

using CommHookRegistry = Registry<CommHookSpec>;

// Every comm hook `ddp` accepts.
CommHookRegistry& comm_hook_registry();

// Adds a hook without options to `registry`.
void add_comm_hook(CommHookRegistry& registry, const std::string& name, std::string description,
                   CommHookSpec::Make make, CommHookTraits traits = {});

// Adds a hook whose options `schema` declares to `registry`; `make` gets them validated.
template <typename Options>
void add_comm_hook(CommHookRegistry& registry, const std::string& name, std::string description,
                   const OptionSchema<Options>& schema,
                   std::type_identity_t<std::function<std::unique_ptr<CommHook>(Communicator&, const Options&)>> make,
                   CommHookTraits traits = {}) {
  registry.add(name, std::move(description), schema, [name, make, traits](const Options& options) {
    return std::make_shared<CommHookSpec>(name, [make, options](Communicator& c) { return make(c, options); }, traits);
  });
}

}  // namespace volt::ddp

#pragma once
// Comm hooks by name: `--strategy "ddp:comm_hook=NAME,<the hook's own keys>"`. DDP's `comm_hook`
// key is extended with this registry (Note [Option extension] in core/option_catalog.h): the keys
// a hook declares are accepted by `ddp` when comm_hook names that hook, checked against the hook's
// declaration, and listed by `--list-strategies` under it. Built in: `allreduce` (the default),
// `fp16_compress`, `bf16_compress`, `noop`, `powersgd` and `batched_powersgd` (strategies/ddp/hooks/).
//
// A hook with keys declares them in an options struct with an OptionSchema and is added with
//   ddp::add_comm_hook(ddp::comm_hook_registry(), "fp16", "compress to float16, all-reduce, decompress",
//                      FP16Options::schema(),
//                      [](Communicator& c, const FP16Options& o) { return std::make_unique<FP16Hook>(c, o); });
// (a built-in: the same call on the registry being built in comm_hook_registry.cpp). Its key names
// must differ from ddp's own. Register before building a Trainer (not thread-safe).
#include <functional>
#include <memory>
#include <string>

#include "core/option_schema.h"
#include "core/registry.h"
#include "strategies/ddp/comm_hook.h"

namespace volt::ddp {

// A comm hook chosen by name with its options, not yet bound to a process group: DDPStrategy
// makes the hook at setup_module, when the communicator exists. Immutable; thread-safe.
class CommHookSpec {
 public:
  using Make = std::function<std::unique_ptr<CommHook>(Communicator&)>;

  // `name`: the registered name that chose it. Throws ConfigurationError for an empty `make`.
  CommHookSpec(std::string name, Make make);
  const std::string& name() const { return name_; }
  // A new hook over `communicator`, which must outlive it.
  std::unique_ptr<CommHook> make(Communicator& communicator) const;

 private:
  std::string name_;
  Make make_;
};

using CommHookRegistry = Registry<CommHookSpec>;

// Every comm hook `ddp` accepts.
CommHookRegistry& comm_hook_registry();

// Adds a hook without options to `registry`.
void add_comm_hook(CommHookRegistry& registry, const std::string& name, std::string description,
                   CommHookSpec::Make make);

// Adds a hook whose options `schema` declares to `registry`; `make` gets them validated.
template <typename Options>
void add_comm_hook(CommHookRegistry& registry, const std::string& name, std::string description,
                   const OptionSchema<Options>& schema,
                   std::type_identity_t<std::function<std::unique_ptr<CommHook>(Communicator&, const Options&)>> make) {
  registry.add(name, std::move(description), schema, [name, make](const Options& options) {
    return std::make_shared<CommHookSpec>(name, [make, options](Communicator& c) { return make(c, options); });
  });
}

}  // namespace volt::ddp

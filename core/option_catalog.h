#pragma once
// The part of a Registry that knows names and their declared options but builds nothing: parsing
// "name:key=value,..." against an entry's declaration, aliases, `--list-*` text, and option
// extensions (below). Registry<T, Args...> (registry.h) adds the factories.
//
// Note [Option extension]: an entry may declare that the value of one of its keys names an entry of
// another catalog, whose keys it then also accepts. `ddp` extends its `comm_hook` key with the
// comm-hook registry, so `--strategy "ddp:comm_hook=powersgd,matrix_approximation_rank=2"` checks
// `matrix_approximation_rank` against powersgd's declaration, `--list-strategies` lists every
// hook's keys under ddp, and a key of another hook fails naming the hook it belongs to. The
// parsed values hold both entries' keys; the factory builds the named sub-entry from them
// (Registry::create(name, values, ...)).
//
// Entries keep their registration order (names(), describe(), error messages): where the order
// means something (precisions, cluster-environment detection) it is the order of registration.
// Registration is not thread-safe: register at start-up, before any Trainer is built.
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/option_spec.h"

namespace volt {

class OptionCatalog {
 public:
  // `kind` names what is registered ("strategy"), `flag` the flag that selects it ("--strategy").
  OptionCatalog(std::string kind, std::string flag);

  const std::string& kind() const { return kind_; }
  bool contains(const std::string& name) const { return entries_.count(name) > 0; }
  // Every name, aliases included, in registration order.
  std::vector<std::string> names() const { return order_; }
  // The names that are not aliases, in registration order; the reference stays valid and follows
  // later registrations.
  const std::vector<std::string>& canonical_names() const { return canonical_order_; }
  // The entry `name` builds: an alias's target, otherwise `name` itself. Throws ConfigurationError
  // for an unknown name, listing the registered ones and the closest.
  std::string canonical_name(const std::string& name) const;
  // The options `name` declares (an alias: its target's), without those of an extension.
  const std::vector<OptionSpec>& options(const std::string& name) const;

  // Declares that the value of `key` (a string option of entry `name`) names an entry of `other`,
  // whose options `name` then accepts too. `other` must outlive this catalog (registries are
  // function-local statics). At most one extension per entry.
  void extend_options(const std::string& name, const std::string& key, const OptionCatalog& other);

  // Checks "name:key=value,..." against the declared options (and those of an extension entry)
  // without building anything. `context` supplies values the caller knows (e.g. a logger's
  // save_dir from the Trainer's default_root_dir) for declared keys the user did not write;
  // an alias's presets come next, the user's values last.
  OptionValues parse(const std::string& spec_text, const OptionContext& context = {}) const;
  // The same for a spec already parsed (parse_named_spec with flag()).
  OptionValues parse(const NamedSpec& spec, const OptionContext& context = {}) const;
  // The flag that selects an entry ("--strategy"), as parse_named_spec's `what`.
  const std::string& flag() const { return flag_; }

  // Every entry with its options, types, defaults and help (what `--list-strategies` prints).
  std::string describe() const;

 protected:
  // Checks values beyond their declared types (an OptionSchema's requirements); may be empty.
  using Check = std::function<void(const OptionValues&)>;
  // What an entry is built from (Registry::create): `spec`'s values as parse() gives them but
  // without the Check, which the factory's own reading runs (OptionSchema::for_building), so that
  // a build validates its options once.
  OptionValues values_for_building(const NamedSpec& spec, const OptionContext& context) const;

  // Throws ConfigurationError for a malformed or taken name.
  void add_entry(const std::string& name, std::string description, std::vector<OptionSpec> options, Check check_values);
  // `alias` builds `target` with `preset` values filled in (the user may still override them).
  void add_alias_entry(const std::string& alias, const std::string& target, std::map<std::string, std::string> preset,
                       std::string description);

 private:
  struct Extension {
    std::string key;
    const OptionCatalog* other = nullptr;
  };
  struct Entry {
    std::string description;
    std::vector<OptionSpec> options;
    Check check;
    std::map<std::string, std::string> preset;
    std::string alias_of;
    Extension extension;
  };

  const Entry& entry(const std::string& name) const;  // throws the "unknown name" error
  const Entry& target(const std::string& name) const;  // an alias's target entry
  // "unknown strategy 'x'; did you mean 'y'? Registered: a, b".
  std::string unknown_name(const std::string& name) const;
  // The user's values for entry `name` merged over `context` and presets, checked against the
  // declared types (an extension's too); no Check runs. `extension_name` receives the canonical
  // name of the extension entry, if any.
  OptionValues resolve(const NamedSpec& spec, const OptionContext& context, std::string* name,
                       std::string* extension_name) const;
  // Fails naming the extension entry that declares `key`, when one does.
  void check_key_of_other_entry(const std::string& owner, const Extension& extension, const std::string& chosen,
                                const std::string& key) const;
  void run_check(const std::string& name, const OptionValues& values) const;

  std::string kind_, flag_;
  std::map<std::string, Entry> entries_;
  std::vector<std::string> order_;
  std::vector<std::string> canonical_order_;
};

}  // namespace volt

#pragma once
// Names → objects, in exactly one place. Strategies, callbacks, loggers, comm hooks, precisions and
// cluster environments are each a Registry<T, Args...>: every entry declares its options, so that
// `--strategy "ddp:static_graph=true"`, `--callback "model_checkpoint:monitor=val_acc"` and
// `--list-strategies` all work the same way, and a user registers their own entries without
// touching volt. `Args` are what every factory needs besides the options (a precision: the
// device; a cluster environment: the variables and the request).
//
// An entry declared with an OptionSchema (option_schema.h) gets its typed options struct, parsed
// and validated; parsing, aliases, `--list-*` text and option extensions are OptionCatalog's.
//
// Registration is not thread-safe: register at start-up, before any Trainer is built.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/option_catalog.h"
#include "core/option_schema.h"
#include "core/option_spec.h"

namespace volt {

template <typename T, typename... Args>
class Registry : public OptionCatalog {
 public:
  using Factory = std::function<std::shared_ptr<T>(const OptionValues&, Args...)>;

  using OptionCatalog::OptionCatalog;

  // Registers `name` with hand-declared options; the factory reads them from OptionValues.
  // Throws ConfigurationError when the name is malformed or already taken.
  void add(const std::string& name, std::string description, std::vector<OptionSpec> options, Factory factory) {
    add_entry(name, std::move(description), std::move(options), nullptr);
    factories_[name] = std::move(factory);
  }

  // Registers `name` with the options `schema` declares. The factory gets them as a validated
  // struct: `(const Options&, Args...)`, or `(const Options&, const OptionValues&, Args...)` where
  // it also builds an extension entry from the same values (the `ddp` strategy its comm hook).
  template <typename Options, typename F>
  void add(const std::string& name, std::string description, const OptionSchema<Options>& schema, F factory) {
    add_entry(name, std::move(description), schema.specs(),
              [schema](const OptionValues& values) { schema.from(values); });
    factories_[name] = [schema, factory = std::move(factory)](const OptionValues& values,
                                                              Args... args) -> std::shared_ptr<T> {
      if constexpr (std::is_invocable_v<const F&, const Options&, const OptionValues&, Args...>) {
        return factory(schema.for_building(values), values, args...);
      } else {
        return factory(schema.for_building(values), args...);
      }
    };
  }

  // Registers `name` without options.
  void add(const std::string& name, std::string description, std::function<std::shared_ptr<T>(Args...)> factory) {
    add(name, std::move(description), std::vector<OptionSpec>{},
        [factory = std::move(factory)](const OptionValues&, Args... args) { return factory(args...); });
  }

  // `alias` builds `target` with `preset` values filled in (the user may still override them).
  void add_alias(const std::string& alias, const std::string& target, std::map<std::string, std::string> preset,
                 std::string description) {
    add_alias_entry(alias, target, std::move(preset), std::move(description));
  }

  // Builds the entry that `spec_text` ("name" or "name:key=value,...") names, with its options.
  std::shared_ptr<T> create(const std::string& spec_text, Args... args) const {
    return create(parse_named_spec(spec_text, flag()), OptionContext{}, args...);
  }

  // The same, with `context` supplying values for declared keys the user did not write (parse()).
  std::shared_ptr<T> create(const std::string& spec_text, const OptionContext& context, Args... args) const {
    return create(parse_named_spec(spec_text, flag()), context, args...);
  }

  // The same for a spec already parsed: the text is parsed once, and the options validated once,
  // by the factory's reading of them (values_for_building).
  std::shared_ptr<T> create(const NamedSpec& spec, const OptionContext& context, Args... args) const {
    return build(canonical_name(spec.name), values_for_building(spec, context), args...);
  }

  // Builds entry `name` from values parsed for another entry that this registry extends (the
  // `ddp` strategy builds its comm hook from its own values); `values` must hold `name`'s keys.
  std::shared_ptr<T> create(const std::string& name, const OptionValues& values, Args... args) const {
    return build(canonical_name(name), values, args...);
  }

 private:
  std::shared_ptr<T> build(const std::string& canonical, const OptionValues& values, Args... args) const {
    auto built = factories_.at(canonical)(values, args...);
    VOLT_INTERNAL_ASSERT(built != nullptr, kind(), " factory for '", canonical, "' returned nullptr");
    return built;
  }

  std::map<std::string, Factory> factories_;
};

}  // namespace volt

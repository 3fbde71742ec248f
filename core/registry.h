#pragma once
// Names → objects, in exactly one place. Strategies, callbacks and loggers are each a Registry<T>:
// every entry declares its options (OptionSpec), so that `--strategy "ddp:static_graph=true"`,
// `--callback "model_checkpoint:monitor=val_acc"` and `--list-strategies` all work the same way,
// and a user registers their own entries without touching volt.
//
// Registration is not thread-safe: register at start-up, before any Trainer is built.
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/option_spec.h"

namespace volt {

template <typename T>
class Registry {
 public:
  using Factory = std::function<std::shared_ptr<T>(const OptionValues&)>;

  // `kind` names what is registered ("strategy"), `flag` the flag that selects it ("--strategy").
  Registry(std::string kind, std::string flag) : kind_(std::move(kind)), flag_(std::move(flag)) {}

  // Registers `name`; throws ConfigurationError when the name is already taken.
  void add(const std::string& name, std::string description, std::vector<OptionSpec> options,
           Factory factory) {
    check<ConfigurationError>(!name.empty() && name.find_first_of(":,= ") == std::string::npos,
                              kind_, " registry: expected a name without ':', ',', '=' or spaces, got '",
                              name, "'");
    check<ConfigurationError>(!entries_.count(name), kind_, " registry: '", name,
                              "' is already registered; pick another name");
    entries_[name] = Entry{std::move(description), std::move(options), std::move(factory), {}, ""};
  }

  // `alias` builds `target` with `preset` values filled in (the user may still override them).
  void add_alias(const std::string& alias, const std::string& target,
                 std::map<std::string, std::string> preset, std::string description) {
    const Entry& base = entry(target);
    OptionValues(kind_ + " '" + alias + "'", base.options, preset);  // presets must be valid
    add(alias, std::move(description), base.options, base.factory);
    entries_[alias].preset = std::move(preset);
    entries_[alias].alias_of = target;
  }

  bool contains(const std::string& name) const { return entries_.count(name) > 0; }

  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [name, entry] : entries_) out.push_back(name);
    return out;
  }

  // Checks "name:key=value,..." against the declared options without building anything.
  // `context` supplies values the caller knows (e.g. a logger's save_dir from the Trainer's
  // default_root_dir) for keys the entry declares and the user did not write.
  OptionValues parse(const std::string& spec_text,
                     const std::map<std::string, std::string>& context = {}) const {
    const NamedSpec spec = parse_named_spec(spec_text, flag_);
    const Entry& e = entry(spec.name);
    std::map<std::string, std::string> values;
    for (const auto& option : e.options) {
      if (auto found = context.find(option.key); found != context.end()) values[option.key] = found->second;
    }
    for (const auto& [key, value] : e.preset) values[key] = value;
    for (const auto& [key, value] : spec.values) values[key] = value;
    return OptionValues(kind_ + " '" + spec.name + "'", e.options, values);
  }

  // Builds the entry that `spec_text` names, with its options.
  std::shared_ptr<T> create(const std::string& spec_text,
                            const std::map<std::string, std::string>& context = {}) const {
    const NamedSpec spec = parse_named_spec(spec_text, flag_);
    auto built = entry(spec.name).factory(parse(spec_text, context));
    VOLT_INTERNAL_ASSERT(built != nullptr, kind_, " factory for '", spec.name, "' returned nullptr");
    return built;
  }

  // Every entry with its options, types, defaults and help (what `--list-strategies` prints).
  std::string describe() const {
    std::ostringstream out;
    for (const auto& [name, e] : entries_) {
      out << name << "  " << e.description;
      if (!e.alias_of.empty()) {
        out << " (alias of " << e.alias_of;
        for (const auto& [key, value] : e.preset) out << ", " << key << "=" << value;
        out << ")";
      }
      out << "\n";
      if (!e.alias_of.empty()) continue;
      for (const auto& o : e.options) {
        out << "    " << o.key << " (" << to_string(o.type) << ", default "
            << (o.default_value.empty() ? "\"\"" : o.default_value) << "): " << o.help << "\n";
      }
    }
    return out.str();
  }

 private:
  struct Entry {
    std::string description;
    std::vector<OptionSpec> options;
    Factory factory;
    std::map<std::string, std::string> preset;
    std::string alias_of;
  };

  const Entry& entry(const std::string& name) const {
    auto found = entries_.find(name);
    if (found != entries_.end()) return found->second;
    const auto all = names();
    std::string valid;
    for (const auto& n : all) valid += (valid.empty() ? "" : ", ") + n;
    const auto suggestion = closest_match(name, all);
    throw ConfigurationError(flag_ + ": unknown " + kind_ + " '" + name + "'" +
                             (suggestion.empty() ? "" : "; did you mean '" + suggestion + "'?") +
                             " Registered: " + valid);
  }

  std::string kind_, flag_;
  std::map<std::string, Entry> entries_;
};

}  // namespace volt

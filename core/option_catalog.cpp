#include "core/option_catalog.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"

namespace volt {
namespace {

// The names a key answers to: itself and its aliases.
std::vector<std::string> names_of(const OptionSpec& spec) {
  auto names = spec.aliases;
  names.insert(names.begin(), spec.key);
  return names;
}

const OptionSpec* find_key(const std::vector<OptionSpec>& specs, const std::string& name) {
  for (const auto& spec : specs) {
    const auto names = names_of(spec);
    if (std::find(names.begin(), names.end(), name) != names.end()) return &spec;
  }
  return nullptr;
}

// Throws when a name of `spec` is already a name of one of `declared` (`what` says whose).
void check_new_key(const std::vector<OptionSpec>& declared, const OptionSpec& spec, const std::string& what) {
  for (const auto& name : names_of(spec)) {
    check<ConfigurationError>(find_key(declared, name) == nullptr, what, " declares the option name '", name,
                              "' twice; rename one");
  }
}

void describe_options(std::ostream& out, const std::vector<OptionSpec>& specs, const std::string& indent) {
  for (const auto& spec : specs) out << indent << describe(spec) << "\n";
}

}  // namespace

OptionCatalog::OptionCatalog(std::string kind, std::string flag) : kind_(std::move(kind)), flag_(std::move(flag)) {}

void OptionCatalog::add_entry(const std::string& name, std::string description, std::vector<OptionSpec> options,
                              Check check_values) {
  check<ConfigurationError>(!name.empty() && name.find_first_of(":,= ") == std::string::npos, kind_,
                            " registry: expected a name without ':', ',', '=' or spaces, got '", name, "'");
  check<ConfigurationError>(!entries_.count(name), kind_, " registry: '", name,
                            "' is already registered; pick another name");
  for (size_t i = 0; i < options.size(); ++i) {
    check_new_key({options.begin(), options.begin() + static_cast<std::ptrdiff_t>(i)}, options[i],
                  kind_ + " registry: '" + name + "'");
  }
  entries_[name] = Entry{std::move(description), std::move(options), std::move(check_values), {}, "", {}};
  order_.push_back(name);
  canonical_order_.push_back(name);
}

void OptionCatalog::add_alias_entry(const std::string& alias, const std::string& target_name,
                                    std::map<std::string, std::string> preset, std::string description) {
  const std::string canonical = canonical_name(target_name);
  add_entry(alias, std::move(description), {}, nullptr);
  canonical_order_.pop_back();
  entries_[alias].preset = std::move(preset);
  entries_[alias].alias_of = canonical;
  try {
    std::string name, extension_name;
    resolve(NamedSpec{.name = alias, .values = {}}, {}, &name,
            &extension_name);  // presets must be declared keys with valid values
  } catch (...) {
    entries_.erase(alias);
    order_.pop_back();
    throw;
  }
}

void OptionCatalog::extend_options(const std::string& name, const std::string& key, const OptionCatalog& other) {
  entry(name);  // throws for an unknown name
  Entry& e = entries_.at(name);
  check<ConfigurationError>(e.alias_of.empty(), kind_, " registry: '", name, "' is an alias of '", e.alias_of,
                            "'; extend the options of '", e.alias_of, "' instead");
  const OptionSpec* spec = find_key(e.options, key);
  check<ConfigurationError>(spec != nullptr && spec->key == key && spec->type == OptionType::String, kind_,
                            " registry: expected '", key, "' to be a string option of '", name,
                            "' to extend it with the ", other.kind(), " registry");
  check<ConfigurationError>(e.extension.other == nullptr, kind_, " registry: the options of '", name,
                            "' are already extended through '", e.extension.key, "'");
  e.extension = Extension{key, &other};
}

std::string OptionCatalog::unknown_name(const std::string& name) const {
  const auto suggestion = closest_match(name, order_);
  return "unknown " + kind_ + " '" + name + "'" + (suggestion.empty() ? "" : "; did you mean '" + suggestion + "'?") +
         " Registered: " + (order_.empty() ? "(none)" : join(order_));
}

const OptionCatalog::Entry& OptionCatalog::entry(const std::string& name) const {
  auto found = entries_.find(name);
  if (found == entries_.end()) throw ConfigurationError(flag_ + ": " + unknown_name(name));
  return found->second;
}

const OptionCatalog::Entry& OptionCatalog::target(const std::string& name) const {
  const Entry& e = entry(name);
  return e.alias_of.empty() ? e : entry(e.alias_of);
}

std::string OptionCatalog::canonical_name(const std::string& name) const {
  const Entry& e = entry(name);
  return e.alias_of.empty() ? name : e.alias_of;
}

const std::vector<OptionSpec>& OptionCatalog::options(const std::string& name) const { return target(name).options; }

void OptionCatalog::check_key_of_other_entry(const std::string& owner, const Extension& extension,
                                             const std::string& chosen, const std::string& key) const {
  const OptionCatalog& other = *extension.other;
  for (const auto& name : other.order_) {
    if (other.entries_.at(name).alias_of.empty() && find_key(other.entries_.at(name).options, key)) {
      throw ConfigurationError(owner + ": option '" + key + "' belongs to " + other.kind_ + " '" + name + "', but " +
                               extension.key + " is '" + chosen + "'; add " + extension.key + "=" + name +
                               " or remove '" + key + "'");
    }
  }
}

// Precedence, lowest first: the declared defaults, `context`, the extension entry's presets, the
// alias's presets, the user's values.
OptionValues OptionCatalog::resolve(const NamedSpec& spec, const OptionContext& context, std::string* name,
                                    std::string* extension_name) const {
  const Entry& named = entry(spec.name);
  const Entry& e = target(spec.name);
  *name = canonical_name(spec.name);
  const std::string owner = kind_ + " '" + spec.name + "'";

  std::vector<OptionSpec> specs = e.options;
  std::map<std::string, std::string> values;
  const Extension& extension = e.extension;
  if (extension.other != nullptr) {
    const OptionCatalog& other = *extension.other;
    const auto own = resolve_aliases(owner, e.options, spec.values);
    std::string chosen = find_key(e.options, extension.key)->default_value;
    if (auto c = context.find(extension.key); c != context.end()) chosen = c->second;
    if (auto p = named.preset.find(extension.key); p != named.preset.end()) chosen = p->second;
    if (auto u = own.find(extension.key); u != own.end()) chosen = u->second;
    check<ConfigurationError>(other.contains(chosen), owner, ": option '", extension.key, "' names an ",
                              other.unknown_name(chosen));
    *extension_name = other.canonical_name(chosen);
    for (const auto& option : other.options(chosen)) {
      check_new_key(specs, option, owner + ": with " + extension.key + "=" + chosen + ", " + spec.name);
      specs.push_back(option);
    }
    for (const auto& key : own) {
      if (find_key(specs, key.first) == nullptr) check_key_of_other_entry(owner, extension, chosen, key.first);
    }
    values = other.entry(chosen).preset;
  }
  for (const auto& option : specs) {
    if (auto found = context.find(option.key); found != context.end() && !values.count(option.key)) {
      values[option.key] = found->second;
    }
  }
  for (const auto& [key, value] : named.preset) values[key] = value;
  for (const auto& [key, value] : resolve_aliases(owner, specs, spec.values)) values[key] = value;
  return OptionValues(owner, specs, values);
}

void OptionCatalog::run_check(const std::string& name, const OptionValues& values) const {
  if (const Entry& e = target(name); e.check) e.check(values);
}

OptionValues OptionCatalog::parse(const std::string& spec_text, const OptionContext& context) const {
  return parse(parse_named_spec(spec_text, flag_), context);
}

OptionValues OptionCatalog::values_for_building(const NamedSpec& spec, const OptionContext& context) const {
  std::string name, extension_name;
  return resolve(spec, context, &name, &extension_name);
}

OptionValues OptionCatalog::parse(const NamedSpec& spec, const OptionContext& context) const {
  std::string name, extension_name;
  OptionValues values = resolve(spec, context, &name, &extension_name);
  run_check(name, values);
  if (!extension_name.empty()) target(name).extension.other->run_check(extension_name, values);
  return values;
}

std::string OptionCatalog::describe() const {
  std::ostringstream out;
  for (const auto& name : order_) {
    const Entry& e = entries_.at(name);
    out << name << "  " << e.description;
    if (!e.alias_of.empty()) {
      out << " (alias of " << e.alias_of;
      for (const auto& [key, value] : e.preset) out << ", " << key << "=" << value;
      out << ")\n";
      continue;
    }
    out << "\n";
    describe_options(out, e.options, "    ");
    if (const OptionCatalog* other = e.extension.other) {
      for (const auto& choice : other->order_) {
        const Entry& sub = other->entries_.at(choice);
        out << "    with " << e.extension.key << "=" << choice << ": " << sub.description;
        if (!sub.alias_of.empty()) out << " (alias of " << sub.alias_of << ")";
        out << (sub.options.empty() && sub.alias_of.empty() ? " (no options)\n" : "\n");
        describe_options(out, sub.options, "        ");
      }
    }
  }
  return out.str();
}

}  // namespace volt

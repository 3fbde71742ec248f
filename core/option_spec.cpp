#include "core/option_spec.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>

#include "core/error.h"

namespace volt {
namespace {

std::string trim(const std::string& s) {
  const auto begin = s.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  const auto end = s.find_last_not_of(" \t");
  return s.substr(begin, end - begin + 1);
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

bool parse_double(const std::string& text, double* out) {
  if (text.empty()) return false;
  std::istringstream in(text);
  in >> *out;
  return !in.fail() && in.eof();
}

bool parse_int(const std::string& text, int64_t* out) {
  // Exactly, as written ("9007199254740993"); through a double only for the 1e6 form.
  if (const auto r = std::from_chars(text.data(), text.data() + text.size(), *out);
      r.ec == std::errc() && r.ptr == text.data() + text.size()) {
    return true;
  }
  double value = 0;
  if (!parse_double(text, &value) || !std::isfinite(value) || std::floor(value) != value ||
      std::abs(value) > 9.0e18) {
    return false;
  }
  *out = static_cast<int64_t>(value);
  return true;
}

bool value_parses(OptionType type, const std::string& text) {
  bool b;
  int64_t i;
  double d;
  switch (type) {
    case OptionType::Bool: return parse_bool(text, &b);
    case OptionType::Int: return parse_int(text, &i);
    case OptionType::Double: return parse_double(text, &d);
    case OptionType::String: return true;
  }
  return false;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// "an int", "a float": the article error messages need.
std::string with_article(OptionType type) {
  return (type == OptionType::Int ? "an " : "a ") + to_string(type);
}

}  // namespace

bool parse_bool(const std::string& text, bool* out) {
  const auto v = lower(text);
  if (v == "true" || v == "1" || v == "yes" || v == "on") return *out = true, true;
  if (v == "false" || v == "0" || v == "no" || v == "off") return *out = false, true;
  return false;
}

std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : separator) + item;
  return out;
}

std::string describe(const OptionSpec& spec) {
  std::string out = spec.key + " (" + (spec.choices.empty() ? to_string(spec.type) : join(spec.choices, "|"));
  const bool unset = spec.optional || (spec.default_value.empty() && spec.type != OptionType::String);
  if (spec.required) {
    out += ", required";
  } else {
    out += unset ? ", unset" : ", default " + (spec.default_value.empty() ? std::string("\"\"") : spec.default_value);
  }
  if (!spec.aliases.empty()) out += ", alias " + join(spec.aliases);
  if (!spec.requirement.empty()) out += ", expects " + spec.requirement;
  if (spec.repeatable) out += ", repeatable";
  if (!spec.implicit_value.empty()) out += ", bare means " + spec.implicit_value;
  return out + "): " + spec.help;
}

std::string key_subject(const std::string& owner, KeyNaming naming, const std::string& key) {
  return naming == KeyNaming::Flag ? "--" + key : owner + ": option '" + key + "'";
}

std::string to_string(OptionType type) {
  switch (type) {
    case OptionType::Bool: return "bool";
    case OptionType::Int: return "int";
    case OptionType::Double: return "float";
    case OptionType::String: return "string";
  }
  return "?";
}

std::map<std::string, std::string> resolve_aliases(const std::string& owner, const std::vector<OptionSpec>& specs,
                                                   const std::map<std::string, std::string>& given) {
  std::map<std::string, std::string> key_of;
  for (const auto& spec : specs) {
    for (const auto& alias : spec.aliases) key_of[alias] = spec.key;
  }
  std::map<std::string, std::string> resolved, written_as;
  for (const auto& [name, value] : given) {
    auto alias = key_of.find(name);
    const std::string& key = alias == key_of.end() ? name : alias->second;
    check<ConfigurationError>(!resolved.count(key), owner, ": option '", key, "' is given twice, as '",
                              written_as[key], "' and as '", name, "'; write one of them");
    resolved[key] = value;
    written_as[key] = name;
  }
  return resolved;
}

std::string closest_match(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::string::npos;
  for (const auto& candidate : candidates) {
    const size_t d = edit_distance(lower(word), lower(candidate));
    if (d < best_distance) best_distance = d, best = candidate;
  }
  // Beyond about half the word's length a "suggestion" is noise.
  return best_distance <= std::max<size_t>(2, word.size() / 2) ? best : "";
}

NamedSpec parse_named_spec(const std::string& text, const std::string& what) {
  NamedSpec spec;
  const auto colon = text.find(':');
  spec.name = trim(text.substr(0, colon));
  check<ConfigurationError>(!spec.name.empty(), what, ": expected 'name' or 'name:key=value,...', got '",
                            text, "'");
  if (colon == std::string::npos) return spec;
  std::istringstream pairs(text.substr(colon + 1));
  std::string pair, last_key;
  while (std::getline(pairs, pair, ',')) {
    if (trim(pair).empty()) continue;
    const auto eq = pair.find('=');
    if (eq == std::string::npos && !last_key.empty()) {
      // A piece without '=' continues the previous value: a list ("model_averaging_periods=2:4,8:8").
      spec.values[last_key].append(",").append(trim(pair));  // not += "," + ...: GCC 12 warns falsely
      continue;
    }
    check<ConfigurationError>(eq != std::string::npos && !trim(pair.substr(0, eq)).empty(), what,
                              ": expected key=value in '", text, "', got '", trim(pair), "'");
    const auto key = trim(pair.substr(0, eq));
    last_key = key;
    check<ConfigurationError>(!spec.values.count(key), what, ": key '", key, "' is given twice in '",
                              text, "'");
    spec.values[key] = trim(pair.substr(eq + 1));
  }
  return spec;
}

OptionValues::OptionValues(std::string owner, const std::vector<OptionSpec>& specs,
                           const std::map<std::string, std::string>& given, KeyNaming naming)
    : OptionValues(std::move(owner), specs, [&] {
        std::map<std::string, std::vector<std::string>> lists;
        for (const auto& [key, text] : given) lists[key] = {text};
        return lists;
      }(), naming) {}

OptionValues::OptionValues(std::string owner, const std::vector<OptionSpec>& specs,
                           const std::map<std::string, std::vector<std::string>>& given, KeyNaming naming)
    : owner_(std::move(owner)), naming_(naming) {
  std::vector<std::string> keys;
  std::map<std::string, const OptionSpec*> spec_of;
  for (const auto& spec : specs) {
    keys.push_back(spec.key);
    keys.insert(keys.end(), spec.aliases.begin(), spec.aliases.end());
    spec_of[spec.key] = &spec;
    Entry entry{spec.type, spec.repeatable, {}, false};
    if (!spec.repeatable) entry.texts = {spec.default_value};
    entries_[spec.key] = std::move(entry);
  }
  // Aliases resolve on the keys alone; the lists travel with them.
  std::map<std::string, std::string> names;
  for (const auto& [name, texts] : given) names[name] = name;
  for (const auto& [key, name] : resolve_aliases(owner_, specs, names)) {
    const std::vector<std::string>& texts = given.at(name);
    auto found = entries_.find(key);
    if (found == entries_.end()) {
      const auto suggestion = closest_match(key, keys);
      const std::string unknown = naming_ == KeyNaming::Flag ? "unknown flag '--" + key + "'"
                                                             : owner_ + ": unknown option '" + key + "'";
      throw ConfigurationError(unknown + (suggestion.empty() ? "" : "; did you mean '" + suggestion + "'?") +
                               " Valid options: " + (keys.empty() ? "(none)" : join(keys)));
    }
    const OptionSpec& spec = *spec_of.at(key);
    check<ConfigurationError>(spec.repeatable || texts.size() == 1, subject(key), " takes one value, got ",
                              texts.size(), " (", join(texts), ")");
    for (const auto& text : texts) {
      check<ConfigurationError>(value_parses(spec.type, text), subject(key), " expects ", with_article(spec.type),
                                ", got '", text, "'");
      check<ConfigurationError>(
          spec.choices.empty() || std::find(spec.choices.begin(), spec.choices.end(), text) != spec.choices.end(),
          subject(key), " expects one of ", join(spec.choices), ", got '", text, "'");
    }
    found->second.texts = texts;
    found->second.set = true;
  }
}

const OptionValues::Entry& OptionValues::entry(const std::string& key, OptionType expected) const {
  auto found = entries_.find(key);
  VOLT_INTERNAL_ASSERT(found != entries_.end(), owner_, " reads undeclared option '", key, "'");
  VOLT_INTERNAL_ASSERT(found->second.type == expected, owner_, " reads option '", key, "' as ", to_string(expected),
                       " but declared it ", to_string(found->second.type));
  return found->second;
}

const std::string& OptionValues::raw(const std::string& key, OptionType expected) const {
  const Entry& e = entry(key, expected);
  VOLT_INTERNAL_ASSERT(!e.repeatable, owner_, " reads the repeatable option '", key, "' as one value");
  return e.texts.front();
}

bool OptionValues::get_bool(const std::string& key) const {
  bool value = false;
  check<ConfigurationError>(parse_bool(raw(key, OptionType::Bool), &value), subject(key), " has no valid default");
  return value;
}

int64_t OptionValues::get_int(const std::string& key) const {
  int64_t value = 0;
  check<ConfigurationError>(parse_int(raw(key, OptionType::Int), &value), subject(key),
                            " has no valid default");
  return value;
}

double OptionValues::get_double(const std::string& key) const {
  double value = 0;
  check<ConfigurationError>(parse_double(raw(key, OptionType::Double), &value), subject(key),
                            " has no valid default");
  return value;
}

const std::string& OptionValues::get_string(const std::string& key) const {
  return raw(key, OptionType::String);
}

const std::vector<std::string>& OptionValues::get_strings(const std::string& key) const {
  const Entry& e = entry(key, OptionType::String);
  VOLT_INTERNAL_ASSERT(e.repeatable, owner_, " reads option '", key, "' as a list but declared it one value");
  return e.texts;
}

bool OptionValues::was_set(const std::string& key) const {
  auto found = entries_.find(key);
  return found != entries_.end() && found->second.set;
}

}  // namespace volt

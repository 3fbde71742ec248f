#include "trainer/config_file.h"

#include <boost/program_options.hpp>

#include <charconv>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "core/option_spec.h"

namespace po = boost::program_options;

namespace volt {
namespace {

std::string shortest_text(double value) {
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

// The value as the lines of a config file would spell it (several for a repeatable flag), or
// nothing for a type this format does not know (a program's own value type).
std::optional<std::vector<std::string>> as_text(const boost::any& value) {
  if (const auto* v = boost::any_cast<std::string>(&value)) return std::vector{*v};
  if (const auto* v = boost::any_cast<std::vector<std::string>>(&value)) return *v;
  if (const auto* v = boost::any_cast<bool>(&value)) return std::vector<std::string>{*v ? "true" : "false"};
  if (const auto* v = boost::any_cast<double>(&value)) return std::vector{shortest_text(*v)};
  if (const auto* v = boost::any_cast<float>(&value)) return std::vector{shortest_text(*v)};
  if (const auto* v = boost::any_cast<int64_t>(&value)) return std::vector{std::to_string(*v)};
  if (const auto* v = boost::any_cast<uint64_t>(&value)) return std::vector{std::to_string(*v)};
  if (const auto* v = boost::any_cast<int>(&value)) return std::vector{std::to_string(*v)};
  if (const auto* v = boost::any_cast<unsigned>(&value)) return std::vector{std::to_string(*v)};
  return std::nullopt;
}

}  // namespace

void store_config_file(const std::string& path, const po::options_description& flags,
                       const std::vector<po::variables_map*>& into) {
  std::ifstream file(path);
  check<ConfigurationError>(file.good(), "--config: cannot read '", path,
                            "'; pass an existing file of 'name = value' lines (--print-config writes one)");
  try {
    const auto parsed = po::parse_config_file(file, flags);
    for (auto* values : into) po::store(parsed, *values);
  } catch (const po::unknown_option& e) {
    std::vector<std::string> names;
    for (const auto& option : flags.options()) names.push_back(option->long_name());
    const auto suggestion = closest_match(e.get_option_name(), names);
    throw ConfigurationError("--config " + path + ": unknown option '" + e.get_option_name() + "'" +
                             (suggestion.empty() ? "" : "; did you mean '" + suggestion + "'?") +
                             " Names are the flags of --help without the dashes.");
  } catch (const po::error& e) {
    throw ConfigurationError("--config " + path + ": " + e.what() + ". Write one 'name = value' per line.");
  }
}

std::vector<ConfigEntry> config_entries(const po::options_description& flags, const po::variables_map& values) {
  std::vector<ConfigEntry> entries;
  for (const auto& option : flags.options()) {
    ConfigEntry entry{option->long_name(), std::nullopt, option->description()};
    const auto found = values.find(entry.name);
    if (found != values.end() && !found->second.empty()) {
      entry.lines = as_text(found->second.value());
      entry.writable = entry.lines.has_value();
      if (!entry.writable) entry.lines = std::vector<std::string>{};
    }
    entries.push_back(std::move(entry));
  }
  return entries;
}

std::string format_config(const std::vector<ConfigEntry>& entries) {
  std::ostringstream out;
  out << "# Read it back with --config FILE; flags on the command line win over it.\n";
  for (const auto& entry : entries) {
    if (!entry.lines) {
      out << "# " << entry.name << " = (not set: " << entry.description << ")\n";
      continue;
    }
    if (!entry.writable) {
      out << "# " << entry.name << " = (set, of a type --print-config cannot write)\n";
      continue;
    }
    for (const auto& line : *entry.lines) {
      check<ConfigurationError>(line.find_first_of("#\r\n") == std::string::npos, "--print-config: the value of ",
                                entry.name, " ('", line,
                                "') has '#' or a line break, which a config file cannot carry");
      out << entry.name << " = " << line << "\n";
    }
  }
  return out.str();
}

}  // namespace volt

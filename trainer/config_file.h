#pragma once
// `--config FILE` and `--print-config`: every flag can also come from an INI-style file of
// `name = value` lines (names as on the command line, without the dashes; a repeatable flag such
// as logger takes one line per value; `#` starts a comment), LightningCLI's --config /
// --print_config. Flags given on the command line win over the file, the file over the defaults.
#include <boost/program_options/options_description.hpp>
#include <boost/program_options/variables_map.hpp>

#include <optional>
#include <string>
#include <vector>

namespace volt {

// One option as --print-config writes it.
struct ConfigEntry {
  std::string name;
  // Its value as lines (several for a repeatable option); nullopt: not set.
  std::optional<std::vector<std::string>> lines;
  std::string description;  // what a comment for an unset option says
  bool writable = true;     // false: set, of a type the format cannot write (a program's own value type)
};

// Reads `path` once and adds the values it sets to each of `into`, where values already stored
// (the command line's) stay. `flags` are the options a file may set. Throws ConfigurationError
// naming the file for a file that cannot be read, an unknown name (with the closest known one) or
// a bad value.
void store_config_file(const std::string& path, const boost::program_options::options_description& flags,
                       const std::vector<boost::program_options::variables_map*>& into);

// The options of `flags` (a program's own, described with Boost.Program_options) as `values` holds
// them (a default counts as set).
std::vector<ConfigEntry> config_entries(const boost::program_options::options_description& flags,
                                        const boost::program_options::variables_map& values);

// The effective configuration, in the format store_config_file reads: one line per value of an
// entry that is set, a comment line for each that is not. Throws ConfigurationError for a value the
// format cannot carry (one with '#' or a line break).
std::string format_config(const std::vector<ConfigEntry>& entries);

}  // namespace volt

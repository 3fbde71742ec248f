#pragma once
// Typed "key=value" options for anything chosen by name (strategies, callbacks, loggers):
// `--strategy "ddp:bucket_cap_mb=10,static_graph=true"`. Each registered name declares its keys with
// a type, a default and help; values are checked against that declaration before anything is built.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace volt {

enum class OptionType { Bool, Int, Double, String };

struct OptionSpec {
  std::string key;
  OptionType type = OptionType::String;
  std::string default_value;  // as it would be written on the command line
  std::string help;
};

// "name:key=value,key=value" split into its parts; values are still text.
struct NamedSpec {
  std::string name;
  std::map<std::string, std::string> values;
};

// Parses "name" or "name:k=v,k=v". Throws ConfigurationError for a missing name, an empty key or a
// pair without '=' ('what' names the flag, e.g. "--strategy", in the message).
NamedSpec parse_named_spec(const std::string& text, const std::string& what);

// The values of one named entry after checking them against its declared options. Every declared
// key has a value (its default when not given). Getters throw ConfigurationError for an
// undeclared key or a type mismatch, naming the entry.
class OptionValues {
 public:
  OptionValues() = default;
  // Checks `given` against `specs`: an unknown key fails naming the valid keys and the closest
  // one; a value that does not parse as the declared type fails naming the key, value and type.
  OptionValues(std::string owner, const std::vector<OptionSpec>& specs,
               const std::map<std::string, std::string>& given);

  bool get_bool(const std::string& key) const;
  int64_t get_int(const std::string& key) const;  // accepts 1e6-style integral values
  double get_double(const std::string& key) const;
  const std::string& get_string(const std::string& key) const;
  // Whether the user wrote the key (as opposed to it holding its default).
  bool was_set(const std::string& key) const;

 private:
  const std::string& raw(const std::string& key, OptionType expected) const;

  std::string owner_;
  std::map<std::string, std::pair<OptionType, std::string>> values_;
  std::map<std::string, bool> set_;
};

std::string to_string(OptionType type);

// The candidate closest to `word` by edit distance ("" when none is reasonably close).
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace volt

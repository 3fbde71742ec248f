#pragma once
// Typed "key=value" options for anything chosen by name (strategies, callbacks, loggers):
// `--strategy "ddp:bucket_cap_mb=10,static_graph=true"`. Each registered name declares its keys with
// a type, a default and help; values are checked against that declaration before anything is built.
// Declarations are usually generated from an options struct by an OptionSchema (option_schema.h).
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
  std::vector<std::string> aliases;  // other names accepted for `key` (e.g. Lightning's); never both
  bool optional = false;             // no default: unset unless the user writes it (see was_set)
  bool required = false;             // optional, and a value must be given (an OptionSchema checks)
  std::vector<std::string> choices;  // the only values accepted; empty: any value of `type`
  std::string requirement;           // what a valid value is ("a value > 0"), for describe()
  // A list: written once per value (`--logger csv --logger tensorboard`); default_value shows the
  // default list, its values separated by spaces.
  bool repeatable = false;
  std::string implicit_value;        // what a flag written without a value means ("" : it needs one)
};

// How messages name a key: an entry's option ("strategy 'ddp': option 'bucket_cap_mb'") or a
// program's flag ("--max-epochs").
enum class KeyNaming { EntryOption, Flag };

// The key as messages name it (see KeyNaming); `owner` names the entry.
std::string key_subject(const std::string& owner, KeyNaming naming, const std::string& key);

// One line of `--list-*`: "key (type, default D | unset | required, alias A, expects R): help"
// (", repeatable" and ", bare means V" where they apply).
std::string describe(const OptionSpec& spec);

// "name:key=value,key=value" split into its parts; values are still text.
struct NamedSpec {
  std::string name;
  std::map<std::string, std::string> values;
};

using OptionContext = std::map<std::string, std::string>;

// Parses "name" or "name:k=v,k=v". A piece without '=' continues the previous value, so a value may
// be a comma-separated list ("name:levels=2:4,8:8,k=v" gives levels "2:4,8:8"). Throws
// ConfigurationError for a missing name, an empty key, or a piece without '=' before any key
// ('what' names the flag, e.g. "--strategy", in the message).
NamedSpec parse_named_spec(const std::string& text, const std::string& what);

// The values of one named entry after checking them against its declared options. Every declared
// key has a value (its default when not given). Getters throw ConfigurationError for an
// undeclared key or a type mismatch, naming the entry.
class OptionValues {
 public:
  OptionValues() = default;
  // Checks `given` against `specs`: an unknown key fails naming the valid keys and the closest
  // one; a value that does not parse as the declared type, or is not one of its choices, fails
  // naming the key, value and type. A key may be given under one of its aliases.
  OptionValues(std::string owner, const std::vector<OptionSpec>& specs,
               const std::map<std::string, std::string>& given, KeyNaming naming = KeyNaming::EntryOption);
  // The same, where a repeatable key may hold several values; any other key takes exactly one.
  OptionValues(std::string owner, const std::vector<OptionSpec>& specs,
               const std::map<std::string, std::vector<std::string>>& given,
               KeyNaming naming = KeyNaming::EntryOption);

  bool get_bool(const std::string& key) const;
  int64_t get_int(const std::string& key) const;  // accepts 1e6-style integral values
  double get_double(const std::string& key) const;
  const std::string& get_string(const std::string& key) const;
  // A repeatable key's values, in the order given (empty when not given).
  const std::vector<std::string>& get_strings(const std::string& key) const;
  // Whether the user wrote the key (as opposed to it holding its default).
  bool was_set(const std::string& key) const;
  // Who these values belong to, for messages ("strategy 'ddp'").
  const std::string& owner() const { return owner_; }
  // The key as this entry's messages name it (key_subject).
  std::string subject(const std::string& key) const { return key_subject(owner_, naming_, key); }

 private:
  struct Entry {
    OptionType type = OptionType::String;
    bool repeatable = false;
    std::vector<std::string> texts;  // a single-valued key: exactly one (its default until set)
    bool set = false;
  };
  const Entry& entry(const std::string& key, OptionType expected) const;
  const std::string& raw(const std::string& key, OptionType expected) const;  // a single-valued key's text

  std::string owner_;
  KeyNaming naming_ = KeyNaming::EntryOption;
  std::map<std::string, Entry> entries_;
};

// `given` with every alias of `specs` replaced by its key. Keys `specs` does not declare pass
// through unchanged (OptionValues rejects them). Throws ConfigurationError, naming `owner`, when a
// key is given under two of its names.
std::map<std::string, std::string> resolve_aliases(const std::string& owner, const std::vector<OptionSpec>& specs,
                                                   const std::map<std::string, std::string>& given);

std::string to_string(OptionType type);

// A boolean as options write it: true/1/yes/on or false/0/no/off, in any case. False when `text`
// is none of them (`out` untouched).
bool parse_bool(const std::string& text, bool* out);

// "a, b, c" (what error messages list).
std::string join(const std::vector<std::string>& items, const std::string& separator = ", ");

// The candidate closest to `word` by edit distance ("" when none is reasonably close).
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace volt

#pragma once
// Every option key declared once: name, member, help and validation, next to each other; the
// default is the member's in-class initializer. From that one declaration come the OptionSpecs a
// registry parses and lists (`--list-strategies`), the options struct filled from parsed values,
// and the validation of a struct built in code:
//
//   struct DDPOptions {
//     double bucket_cap_mb = 25.0;
//     bool static_graph = false;
//     static const OptionSchema<DDPOptions>& schema();
//     void validate() const { schema().validate(*this); }
//   };
//   const OptionSchema<DDPOptions>& DDPOptions::schema() {
//     static const auto s = OptionSchema<DDPOptions>("--strategy ddp")
//         .option("bucket_cap_mb", &DDPOptions::bucket_cap_mb, "bucket size in MiB", greater_than(0.0))
//         .option("static_graph", &DDPOptions::static_graph, "the same parameters every iteration");
//     return s;
//   }
//
// A member's type says the option's type: bool, int64_t, double, std::string, or std::optional of
// one (unset unless the user writes it). Enumerations are choice()s; lists of text repeated()s;
// any other type is an option with a TextForm that parses and formats it. Members may be declared
// in a base of Options (a schema for TrainerOptions declares RunOptions's too). A requirement
// (greater_than, at_least, at_most, in_range, one_of, satisfies, required) fails as
// "<owner>: option 'k' expects <requirement>, got <value>; k: <help>", or, for a schema of
// command-line flags (KeyNaming::Flag), "--k expects <requirement>, got <value>; --k: <help>".
// Immutable once built; thread-safe to use.
#include <algorithm>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/option_spec.h"

namespace volt {

// The text form of a value type the schema does not know (a duration, a schedule).
template <typename V>
struct TextForm {
  std::string description;                       // what valid text is: "a duration DD:HH:MM:SS"
  std::function<V(const std::string&)> parse;    // throws ConfigurationError for malformed text
  std::function<std::string(const V&)> format;   // text that `parse` reads back to the same value
};

// A condition on a key's value; `text` completes "expects ..." ("a value > 0").
template <typename Predicate>
struct Requirement {
  std::string text;
  Predicate holds;
};

// That a std::optional member is set.
struct Required {
  std::string text = "a value";
};

namespace option_detail {

template <typename T>
struct Optional : std::false_type {
  using value_type = T;
};
template <typename T>
struct Optional<std::optional<T>> : std::true_type {
  using value_type = T;
};
// The type an option of member type M holds: M, or T for std::optional<T>.
template <typename M>
using ValueOf = typename Optional<M>::value_type;

// The shortest text that reads back to exactly `value` ("25", "0.999", "1e-06").
std::string format_double(double value);
template <typename N>
std::string number_text(N value) {
  if constexpr (std::is_floating_point_v<N>) return format_double(static_cast<double>(value));
  else return std::to_string(value);
}

template <typename Predicate>
Requirement<Predicate> requirement(std::string text, Predicate holds) {
  return {std::move(text), std::move(holds)};
}

// How an option of value type V is read from OptionValues, declared and printed.
template <typename V>
struct Form {
  OptionType type = OptionType::String;
  std::vector<std::string> choices;
  std::string description;  // a TextForm's, part of the declared requirement
  bool quoted = false;      // printed in quotes in messages (text, not numbers)
  std::function<V(const OptionValues&, const std::string& key)> read;
  std::function<std::string(const V&)> format;
};

template <typename V>
Form<V> plain_form() {
  if constexpr (std::is_same_v<V, bool>) {
    return {OptionType::Bool, {}, "", false,
            [](const OptionValues& v, const std::string& k) { return v.get_bool(k); },
            [](const bool& b) { return std::string(b ? "true" : "false"); }};
  } else if constexpr (std::is_same_v<V, int64_t>) {
    return {OptionType::Int, {}, "", false,
            [](const OptionValues& v, const std::string& k) { return v.get_int(k); },
            [](const int64_t& i) { return std::to_string(i); }};
  } else if constexpr (std::is_same_v<V, double>) {
    return {OptionType::Double, {}, "", false,
            [](const OptionValues& v, const std::string& k) { return v.get_double(k); }, format_double};
  } else if constexpr (std::is_same_v<V, std::string>) {
    return {OptionType::String, {}, "", true,
            [](const OptionValues& v, const std::string& k) { return v.get_string(k); },
            [](const std::string& s) { return s; }};
  } else {
    static_assert(!sizeof(V),
                  "OptionSchema::option: a member of type bool, int64_t, double, std::string or std::optional of "
                  "one; declare an enumeration with choice(), another type with a TextForm");
  }
}

template <typename V>
Form<V> custom_form(TextForm<V> text_form) {
  Form<V> form{OptionType::String, {}, text_form.description, true, nullptr, text_form.format};
  form.read = [text_form](const OptionValues& values, const std::string& key) {
    const std::string& text = values.get_string(key);
    try {
      return text_form.parse(text);
    } catch (const ConfigurationError& error) {
      throw ConfigurationError(values.subject(key) + " expects " + text_form.description + ", got '" + text +
                               "' (" + error.what() + ")");
    }
  };
  return form;
}

template <typename V>
Form<V> choice_form(std::vector<std::pair<std::string, V>> table) {
  Form<V> form{OptionType::String, {}, "", true, nullptr, nullptr};
  for (const auto& [name, value] : table) form.choices.push_back(name);
  form.read = [table](const OptionValues& values, const std::string& key) {
    const std::string& text = values.get_string(key);  // OptionValues admits only the choices
    for (const auto& [name, value] : table) {
      if (name == text) return value;
    }
    throw InternalError(values.subject(key) + " holds '" + text + "', which is not a choice");
  };
  form.format = [table](const V& value) {
    for (const auto& [name, v] : table) {
      if (v == value) return name;
    }
    return std::string("(not a choice)");
  };
  return form;
}

}  // namespace option_detail

template <typename N>
auto greater_than(N bound) {
  return option_detail::requirement("a value > " + option_detail::number_text(bound),
                                    [bound](const auto& v) { return v > bound; });
}
template <typename N>
auto at_least(N bound) {
  return option_detail::requirement("a value >= " + option_detail::number_text(bound),
                                    [bound](const auto& v) { return v >= bound; });
}
template <typename N>
auto at_most(N bound) {
  return option_detail::requirement("a value <= " + option_detail::number_text(bound),
                                    [bound](const auto& v) { return v <= bound; });
}
// Both bounds included.
template <typename N>
auto in_range(N low, N high) {
  return option_detail::requirement(
      "a value in [" + option_detail::number_text(low) + ", " + option_detail::number_text(high) + "]",
      [low, high](const auto& v) { return v >= low && v <= high; });
}
template <typename T>
auto one_of(std::initializer_list<T> allowed) {
  std::vector<T> values(allowed);
  std::vector<std::string> texts;
  for (const auto& v : values) {
    if constexpr (std::is_arithmetic_v<T>) texts.push_back(option_detail::number_text(v));
    else texts.push_back(std::string(v));
  }
  return option_detail::requirement("one of " + join(texts), [values](const auto& v) {
    for (const auto& allowed_value : values) {
      if (v == allowed_value) return true;
    }
    return false;
  });
}
// Any condition; `text` completes "expects ...".
template <typename Predicate>
auto satisfies(Predicate predicate, std::string text) {
  return option_detail::requirement(std::move(text), std::move(predicate));
}
// A std::optional member must be set.
inline Required required() { return {}; }

template <typename Options>
class OptionSchema {
 public:
  // `owner` starts every message ("--strategy ddp", "EarlyStopping"); `naming` says how messages
  // name a key (KeyNaming::Flag: "--max-epochs", for a program's flags).
  explicit OptionSchema(std::string owner, KeyNaming naming = KeyNaming::EntryOption)
      : owner_(std::move(owner)), naming_(naming) {}

  // An option whose type is the member's: bool, int64_t, double, std::string or std::optional of one.
  template <typename C, typename M, typename... Requirements>
  OptionSchema& option(std::string key, M C::*member, std::string help, Requirements... requirements) {
    return bind(std::move(key), as_member(member), option_detail::plain_form<option_detail::ValueOf<M>>(),
                std::move(help), std::move(requirements)...);
  }

  // An option of any other type, read and written through `form`.
  template <typename C, typename M, typename... Requirements>
  OptionSchema& option(std::string key, M C::*member, TextForm<option_detail::ValueOf<M>> form, std::string help,
                       Requirements... requirements) {
    return bind(std::move(key), as_member(member), option_detail::custom_form(std::move(form)), std::move(help),
                std::move(requirements)...);
  }

  // An enumeration: the user writes one of the table's names.
  template <typename C, typename M, typename... Requirements>
  OptionSchema& choice(std::string key, M C::*member,
                       std::vector<std::pair<std::string, option_detail::ValueOf<M>>> table, std::string help,
                       Requirements... requirements) {
    return bind(std::move(key), as_member(member), option_detail::choice_form(std::move(table)), std::move(help),
                std::move(requirements)...);
  }

  // A list of text, one value per time the key is written (`--callback a --callback b`). The value
  // `empty_word` written alone means the empty list (`--logger none`), and an empty list is
  // written as it; it may not stand beside other values.
  template <typename C>
  OptionSchema& repeated(std::string key, std::vector<std::string> C::*member, std::string help,
                         std::string empty_word) {
    const auto list = as_member(member);
    auto shown = [empty_word](const std::vector<std::string>& values) {
      return values.empty() ? std::vector<std::string>{empty_word} : values;
    };
    Binding binding;
    binding.spec.key = key;
    binding.spec.help = help;
    binding.spec.repeatable = true;
    binding.spec.default_value = join(shown(Options{}.*list), " ");
    binding.read = [list, key, empty_word](const OptionValues& values, Options& options) {
      if (!values.was_set(key)) return;
      const auto& texts = values.get_strings(key);
      const bool empty = std::find(texts.begin(), texts.end(), empty_word) != texts.end();
      check<ConfigurationError>(!empty || texts.size() == 1, values.subject(key), ": '", empty_word,
                                "' (no value) stands alone, got ", join(texts));
      options.*list = empty ? std::vector<std::string>{} : texts;
    };
    binding.format = [list, shown](const Options& options) {
      return std::optional<std::vector<std::string>>(shown(options.*list));
    };
    bindings_.push_back(std::move(binding));
    return *this;
  }

  // What the key declared last means when written without a value (`--deterministic` is
  // `--deterministic=true`, `--fast-dev-run` is `--fast-dev-run=1`).
  OptionSchema& implicit_value(std::string text) {
    check<ConfigurationError>(!bindings_.empty(), owner_, ": implicit value '", text, "' declared before any option");
    OptionSpec& spec = bindings_.back().spec;
    OptionValues(owner_, {spec}, std::map<std::string, std::string>{{spec.key, text}}, naming_);  // it must parse
    spec.implicit_value = std::move(text);
    return *this;
  }

  // Declares the options `declare(*this)` adds: keys that several schemas share, declared once in a
  // function (strategies/shared_strategy_options.h).
  template <typename Declare>
  OptionSchema& with(Declare&& declare) {
    declare(*this);
    return *this;
  }

  // Another name accepted for the key declared last (e.g. Lightning's name for it).
  OptionSchema& alias(std::string name) {
    check<ConfigurationError>(!bindings_.empty(), owner_, ": alias '", name, "' declared before any option");
    bindings_.back().spec.aliases.push_back(std::move(name));
    return *this;
  }

  const std::string& owner() const { return owner_; }
  KeyNaming naming() const { return naming_; }

  std::vector<OptionSpec> specs() const {
    std::vector<OptionSpec> out;
    for (const auto& binding : bindings_) out.push_back(binding.spec);
    return out;
  }

  // Checks every key's requirements; throws ConfigurationError for the first that fails.
  void validate(const Options& options) const {
    for (const auto& binding : bindings_) {
      for (const auto& check_requirement : binding.checks) check_requirement(options);
    }
  }

  // `given` (key → its values as written) checked against these keys, named as this schema names them.
  OptionValues values(const std::map<std::string, std::vector<std::string>>& given) const {
    return OptionValues(owner_, specs(), given, naming_);
  }

  // Each key with the text that sets `options`'s value (several for a repeated key), or nullopt
  // for an unset std::optional: what a configuration file writes back (--print-config).
  std::vector<std::pair<std::string, std::optional<std::vector<std::string>>>> texts(const Options& options) const {
    std::vector<std::pair<std::string, std::optional<std::vector<std::string>>>> out;
    for (const auto& binding : bindings_) out.emplace_back(binding.spec.key, binding.format(options));
    return out;
  }

  // The struct with every key the values hold set (the others keep their in-class defaults),
  // not validated.
  Options read(const OptionValues& values) const {
    Options options{};
    for (const auto& binding : bindings_) binding.read(values, options);
    return options;
  }

  // The same, validated: by Options::validate() where it exists (which may add checks across
  // keys), otherwise by validate().
  Options from(const OptionValues& values) const {
    Options options = read(values);
    if constexpr (requires(const Options& o) { o.validate(); }) {
      options.validate();
    } else {
      validate(options);
    }
    return options;
  }

  // Declares that what these options build validates them itself (a strategy's constructor calls
  // Options::validate(), since users also build it from a struct): a registry then builds it from
  // read(), so that they are validated once.
  OptionSchema& validated_by_what_it_builds() {
    validated_by_what_it_builds_ = true;
    return *this;
  }
  // The options a registry builds its entry from: read() or from(), as declared above.
  Options for_building(const OptionValues& values) const {
    return validated_by_what_it_builds_ ? read(values) : from(values);
  }

 private:
  struct Binding {
    OptionSpec spec;
    std::function<void(const OptionValues&, Options&)> read;
    std::function<std::optional<std::vector<std::string>>(const Options&)> format;
    std::vector<std::function<void(const Options&)>> checks;
  };

  // A member of Options or of one of its bases, as a member of Options.
  template <typename C, typename M>
  static M Options::*as_member(M C::*member) {
    static_assert(std::is_base_of_v<C, Options>, "OptionSchema: a member of the options struct or of a base of it");
    return member;
  }

  template <typename M, typename V, typename... Requirements>
  OptionSchema& bind(std::string key, M Options::*member, option_detail::Form<V> form, std::string help,
                     Requirements... requirements) {
    static_assert(std::is_same_v<option_detail::ValueOf<M>, V>);
    Binding binding;
    binding.spec.key = key;
    binding.spec.type = form.type;
    binding.spec.help = help;
    binding.spec.choices = form.choices;
    const Options defaults{};
    if constexpr (option_detail::Optional<M>::value) {
      binding.spec.optional = !(defaults.*member).has_value();
      if ((defaults.*member).has_value()) binding.spec.default_value = form.format(*(defaults.*member));
    } else {
      binding.spec.default_value = form.format(defaults.*member);
    }
    check<ConfigurationError>(form.choices.empty() || binding.spec.optional ||
                                  std::find(form.choices.begin(), form.choices.end(), binding.spec.default_value) !=
                                      form.choices.end(),
                              owner_, ": the default of '", key, "' is not one of its choices; add it to the table");
    binding.spec.required = (std::is_same_v<Requirements, Required> || ...);
    std::vector<std::string> texts;
    if (!form.description.empty()) texts.push_back(form.description);
    ((std::is_same_v<Requirements, Required> ? void() : texts.push_back(requirements.text)), ...);
    binding.spec.requirement = join(texts, " and ");
    binding.read = [member, form, key](const OptionValues& values, Options& options) {
      if (values.was_set(key)) options.*member = form.read(values, key);
    };
    binding.format = [member, form](const Options& options) -> std::optional<std::vector<std::string>> {
      if constexpr (option_detail::Optional<M>::value) {
        if (!(options.*member).has_value()) return std::nullopt;
        return std::vector<std::string>{form.format(*(options.*member))};
      } else {
        return std::vector<std::string>{form.format(options.*member)};
      }
    };
    (binding.checks.push_back(make_check(key, member, form, help, std::move(requirements))), ...);
    bindings_.push_back(std::move(binding));
    return *this;
  }

  template <typename M, typename V, typename R>
  std::function<void(const Options&)> make_check(const std::string& key, M Options::*member,
                                                 const option_detail::Form<V>& form, const std::string& help,
                                                 R requirement) const {
    const std::string subject = key_subject(owner_, naming_, key);
    const std::string named = naming_ == KeyNaming::Flag ? subject : key;
    auto fail = [subject, named, help, text = requirement.text](const std::string& got) {
      throw ConfigurationError(subject + " expects " + text + ", got " + got + "; " + named + ": " + help);
    };
    auto shown = [form](const V& value) {
      const std::string text = form.format(value);
      return form.quoted ? std::string("'").append(text).append("'") : text;
    };
    return [member, requirement, fail, shown](const Options& options) {
      const M& value = options.*member;
      if constexpr (std::is_same_v<R, Required>) {
        static_assert(option_detail::Optional<M>::value, "required(): for std::optional members");
        if (!value.has_value()) fail("unset");
      } else if constexpr (option_detail::Optional<M>::value) {
        if (value.has_value() && !requirement.holds(*value)) fail(shown(*value));
      } else {
        if (!requirement.holds(value)) fail(shown(value));
      }
    };
  }

  bool validated_by_what_it_builds_ = false;
  std::string owner_;
  KeyNaming naming_ = KeyNaming::EntryOption;
  std::vector<Binding> bindings_;
};

}  // namespace volt

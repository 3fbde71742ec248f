// TrainerOptions from the command line and --config files: the flags are TrainerOptions::schema()'s
// keys (Note [Flags from the schema]); a program may add its own flags beside volt's.
#include <boost/make_shared.hpp>
#include <boost/program_options.hpp>

#include <map>
#include <sstream>

#include "callbacks/callback_registry.h"
#include "core/option_schema.h"
#include "loggers/logger_registry.h"
#include "strategies/strategy_registry.h"
#include "trainer/config_file.h"
#include "trainer/trainer_options.h"

namespace po = boost::program_options;

namespace volt {
namespace {

// Flags that act on this command line itself and so are not options a config file sets.
po::options_description command_line_flags() {
  po::options_description flags("Command line");
  flags.add_options()
      ("help,h", "print this help and exit")
      ("list-strategies", "print the registered strategies with their options and exit")
      ("list-callbacks", "print the registered callbacks with their options and exit")
      ("list-loggers", "print the registered loggers with their options and exit")
      ("config", po::value<std::string>(),
       "read flags from this file of 'name = value' lines (see --print-config); flags given here win")
      ("print-config", "print the effective configuration in --config's format and exit");
  return flags;
}

// Note [Flags from the schema]: the Trainer's flags are TrainerOptions::schema()'s keys, declared
// once with their help, default and requirements. Boost.Program_options only splits the command
// line and the --config file into text (each flag a string, or a list of strings for a repeatable
// one), so that a program's own flags sit beside volt's in one parser and one --help; the schema
// then parses, checks and stores every value, and writes --print-config back from the options it
// built. A flag added to the schema is thereby on the command line, in --config, in --help and in
// --print-config, and tests/docs/doc_links_test.py reads the schema's keys to check that the docs
// name each one.
std::string help_of(const OptionSpec& spec) {
  std::string help = spec.help;
  if (spec.repeatable) help += " (repeatable; '" + spec.default_value + "' by default)";
  if (!spec.choices.empty()) help += " (one of: " + join(spec.choices) + ")";
  return help;
}

po::options_description volt_flags() {
  po::options_description flags("volt Trainer options");
  for (const auto& spec : TrainerOptions::schema().specs()) {
    po::value_semantic* value = nullptr;
    if (spec.repeatable) {
      value = po::value<std::vector<std::string>>()->multitoken();
    } else {
      auto* text = po::value<std::string>();
      if (!spec.optional) text->default_value(spec.default_value);
      if (!spec.implicit_value.empty()) text->implicit_value(spec.implicit_value);
      value = text;
    }
    flags.add(boost::make_shared<po::option_description>(spec.key.c_str(), value, help_of(spec).c_str()));
  }
  return flags;
}

// The values `vm` holds for volt's flags that were written (not defaulted), as text.
std::map<std::string, std::vector<std::string>> written_flags(const po::variables_map& vm) {
  std::map<std::string, std::vector<std::string>> given;
  for (const auto& spec : TrainerOptions::schema().specs()) {
    const auto found = vm.find(spec.key);
    if (found == vm.end() || found->second.defaulted()) continue;
    given[spec.key] = spec.repeatable ? found->second.as<std::vector<std::string>>()
                                      : std::vector<std::string>{found->second.as<std::string>()};
  }
  return given;
}

// The options the user's flags and --config file set: each value read by the schema, all validated.
TrainerOptions options_from(const po::variables_map& vm) {
  const auto& schema = TrainerOptions::schema();
  return schema.from(schema.values(written_flags(vm)));
}

// Stores the values of the --config file at `path` in `vm` (the command line's stay). Each value
// the file sets and the command line does not is also read and checked on its own, so that a bad
// one names the file; checks across flags wait for the command line's values (options_from).
void store_config(const std::string& path, const po::options_description& configurable, po::variables_map& vm) {
  po::variables_map from_file;
  auto from_command_line = written_flags(vm);
  store_config_file(path, configurable, {&from_file, &vm});
  auto from_file_alone = written_flags(from_file);
  for (const auto& [key, texts] : from_command_line) from_file_alone.erase(key);
  try {
    const auto& schema = TrainerOptions::schema();
    schema.validate(schema.read(schema.values(from_file_alone)));
  } catch (const ConfigurationError& error) {
    throw ConfigurationError("--config " + path + ": " + error.what());
  }
}

// What --print-config writes: the program's own flags as parsed, then volt's as `options` holds them.
std::string printed_config(const po::options_description& program_options, const po::variables_map& vm,
                           const TrainerOptions& options) {
  auto entries = config_entries(program_options, vm);
  const auto specs = TrainerOptions::schema().specs();
  const auto texts = TrainerOptions::schema().texts(options);
  for (size_t i = 0; i < specs.size(); ++i) entries.push_back({specs[i].key, texts[i].second, specs[i].help});
  return format_config(entries);
}

std::vector<std::string> long_names(const po::options_description& description) {
  std::vector<std::string> names;
  for (const auto& option : description.options()) names.push_back("--" + option->long_name());
  return names;
}

}  // namespace

TrainerOptions TrainerOptions::from_args(int argc, const char* const argv[]) {
  po::options_description none;
  return from_args(argc, argv, none, nullptr);
}

TrainerOptions TrainerOptions::from_args(int argc, const char* const argv[],
                                         const po::options_description& program_options,
                                         po::variables_map* program_values) {
  po::options_description configurable;  // what a --config file may set too
  if (!program_options.options().empty()) configurable.add(program_options);
  configurable.add(volt_flags());
  po::options_description all;
  all.add(configurable).add(command_line_flags());
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv)
                      .options(all)
                      // No abbreviations: a typo such as --max-epoch must not pass for --max-epochs.
                      .style(po::command_line_style::default_style & ~po::command_line_style::allow_guessing)
                      .run(), vm);
    if (vm.count("config") && !vm.count("help")) store_config(vm["config"].as<std::string>(), configurable, vm);
    po::notify(vm);
  } catch (const po::unknown_option& e) {
    const auto suggestion = closest_match(e.get_option_name(), long_names(all));
    throw ConfigurationError("unknown flag '" + e.get_option_name() + "'" +
                             (suggestion.empty() ? "" : "; did you mean '" + suggestion + "'?") +
                             " Run with --help for every flag.");
  } catch (const po::too_many_positional_options_error&) {
    throw ConfigurationError("unexpected positional argument; flags take values as --flag VALUE, "
                             "and switches like --deterministic as --deterministic=false");
  } catch (const po::error& e) {
    throw ConfigurationError(std::string(e.what()) + ". Run with --help for every flag.");
  }
  if (vm.count("help")) {
    std::ostringstream text;
    text << "Usage: " << (argc > 0 ? argv[0] : "program") << " [options]\n" << all;
    throw HelpRequested(text.str());
  }
  if (vm.count("list-strategies")) throw HelpRequested(strategy_registry().describe());
  if (vm.count("list-callbacks")) throw HelpRequested(callback_registry().describe());
  if (vm.count("list-loggers")) throw HelpRequested(logger_registry().describe());
  if (program_values) *program_values = vm;
  auto options = options_from(vm);
  options.validate();
  // After validation, so that what is printed is a configuration that runs.
  if (vm.count("print-config")) throw HelpRequested(printed_config(program_options, vm, options));
  return options;
}

}  // namespace volt

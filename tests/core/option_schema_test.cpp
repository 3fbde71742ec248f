// An options struct's keys declared once: the declaration gives the OptionSpecs (types from the
// members, defaults from the in-class initializers), fills the struct from parsed values, and
// validates structs however they were built, with messages that name the key and the value.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

#include "core/duration.h"
#include "core/error.h"
#include "tests/support/test_support.h"
#include "core/option_schema.h"

namespace volt {
namespace {

enum class Direction { Up, Down };

struct GadgetOptions {
  bool shiny = true;
  int64_t teeth = 12;
  double ratio = 1.0 / 3.0;  // not a short decimal: the default text must still read back exactly
  std::string label = "gear";
  std::optional<double> threshold;
  std::optional<int64_t> limit;
  Direction direction = Direction::Down;
  std::optional<std::chrono::seconds> interval;
  std::chrono::seconds budget{90};

  static const OptionSchema<GadgetOptions>& schema() {
    using O = GadgetOptions;
    static const auto schema =
        OptionSchema<O>("Gadget")
            .option("shiny", &O::shiny, "polished")
            .alias("polished")
            .option("teeth", &O::teeth, "how many", at_least(1), at_most(100))
            .option("ratio", &O::ratio, "gear ratio", greater_than(0.0))
            .option("label", &O::label, "name tag", one_of({"gear", "cog"}))
            .option("threshold", &O::threshold, "stop above this",
                    satisfies([](double t) { return std::isfinite(t); }, "a finite number"))
            .option("limit", &O::limit, "at most this many", in_range<int64_t>(0, 10))
            .choice("direction", &O::direction, {{"up", Direction::Up}, {"down", Direction::Down}}, "which way")
            .option("interval", &O::interval, duration_form(), "how often", required())
            .option("budget", &O::budget, duration_form(), "how long");
    return schema;
  }
  void validate() const { schema().validate(*this); }
};

const OptionSpec& spec_of(const std::string& key) {
  static const auto specs = GadgetOptions::schema().specs();
  for (const auto& spec : specs) {
    if (spec.key == key) return spec;
  }
  throw std::runtime_error("no spec " + key);
}

OptionValues values_of(const std::map<std::string, std::string>& given) {
  return OptionValues("gadget", GadgetOptions::schema().specs(), given);
}

using testing::configuration_error_of;

TEST(OptionSchema, TypesComeFromTheMembers) {
  EXPECT_EQ(spec_of("shiny").type, OptionType::Bool);
  EXPECT_EQ(spec_of("teeth").type, OptionType::Int);
  EXPECT_EQ(spec_of("ratio").type, OptionType::Double);
  EXPECT_EQ(spec_of("label").type, OptionType::String);
  EXPECT_EQ(spec_of("threshold").type, OptionType::Double);
  EXPECT_EQ(spec_of("limit").type, OptionType::Int);
  EXPECT_EQ(spec_of("direction").type, OptionType::String);
  EXPECT_EQ(spec_of("direction").choices, (std::vector<std::string>{"up", "down"}));
  EXPECT_EQ(spec_of("interval").type, OptionType::String);
  EXPECT_EQ(GadgetOptions::schema().specs().size(), 9u);
}

TEST(OptionSchema, DefaultsAreTheStructsInClassInitializers) {
  EXPECT_EQ(spec_of("shiny").default_value, "true");
  EXPECT_EQ(spec_of("teeth").default_value, "12");
  EXPECT_EQ(spec_of("label").default_value, "gear");
  EXPECT_EQ(spec_of("direction").default_value, "down");
  EXPECT_EQ(spec_of("budget").default_value, "00:00:01:30");
  EXPECT_EQ(std::stod(spec_of("ratio").default_value), 1.0 / 3.0) << spec_of("ratio").default_value;
  for (const char* key : {"threshold", "limit"}) {
    EXPECT_TRUE(spec_of(key).optional) << key;
    EXPECT_FALSE(spec_of(key).required) << key;
    EXPECT_NE(describe(spec_of(key)).find(", unset"), std::string::npos) << describe(spec_of(key));
  }
  EXPECT_TRUE(spec_of("interval").optional);
  EXPECT_TRUE(spec_of("interval").required);
  EXPECT_FALSE(spec_of("teeth").optional);
  // Whatever is not written keeps the struct's own default, bit for bit.
  const auto parsed = GadgetOptions::schema().from(values_of({{"interval", "00:00:00:05"}}));
  EXPECT_TRUE(parsed.shiny);
  EXPECT_EQ(parsed.teeth, 12);
  EXPECT_EQ(parsed.ratio, 1.0 / 3.0);
  EXPECT_EQ(parsed.budget, std::chrono::seconds(90));
  EXPECT_FALSE(parsed.threshold.has_value());
  EXPECT_FALSE(parsed.limit.has_value());
}

TEST(OptionSchema, FillsEveryKindOfMember) {
  const auto o = GadgetOptions::schema().from(values_of({{"shiny", "false"},
                                                         {"teeth", "1e2"},
                                                         {"ratio", "0.1"},
                                                         {"label", "cog"},
                                                         {"threshold", "2.5"},
                                                         {"limit", "7"},
                                                         {"direction", "up"},
                                                         {"interval", "01:02:03:04"},
                                                         {"budget", "00:00:00:01"}}));
  EXPECT_FALSE(o.shiny);
  EXPECT_EQ(o.teeth, 100);
  EXPECT_EQ(o.ratio, 0.1);
  EXPECT_EQ(o.label, "cog");
  EXPECT_EQ(o.threshold, 2.5);
  EXPECT_EQ(o.limit, 7);
  EXPECT_EQ(o.direction, Direction::Up);
  EXPECT_EQ(o.interval, std::chrono::seconds(((1 * 24 + 2) * 60 + 3) * 60 + 4));
  EXPECT_EQ(o.budget, std::chrono::seconds(1));
}

TEST(OptionSchema, ChoicesAcceptOnlyTheirNames) {
  const auto message = configuration_error_of([] { values_of({{"direction", "sideways"}}); });
  EXPECT_NE(message.find("option 'direction' expects one of up, down, got 'sideways'"), std::string::npos) << message;
  EXPECT_NE(describe(spec_of("direction")).find("direction (up|down, default down)"), std::string::npos)
      << describe(spec_of("direction"));
}

TEST(OptionSchema, CustomParsedValuesNameTheirFormWhenMalformed) {
  const auto message =
      configuration_error_of([] { GadgetOptions::schema().from(values_of({{"interval", "5 minutes"}})); });
  EXPECT_NE(message.find("option 'interval' expects a duration DD:HH:MM:SS, got '5 minutes'"), std::string::npos)
      << message;
  EXPECT_EQ(format_duration(parse_duration("12:23:59:58", "test")), "12:23:59:58");
}

TEST(OptionSchema, AnAliasIsAnotherNameForTheKeyButNotASecondValue) {
  EXPECT_FALSE(GadgetOptions::schema().from(values_of({{"polished", "false"}, {"interval", "00:00:00:01"}})).shiny);
  const auto message = configuration_error_of([] { values_of({{"shiny", "true"}, {"polished", "false"}}); });
  EXPECT_NE(message.find("option 'shiny' is given twice, as 'polished' and as 'shiny'"), std::string::npos) << message;
  EXPECT_NE(describe(spec_of("shiny")).find("alias polished"), std::string::npos) << describe(spec_of("shiny"));
  const auto unknown = configuration_error_of([] { values_of({{"polishd", "true"}}); });
  EXPECT_NE(unknown.find("did you mean 'polished'"), std::string::npos) << unknown;
}

// Each requirement's message: "<owner>: option 'k' expects <requirement>, got <value>; k: <help>".
TEST(OptionSchema, EachRequirementNamesTheKeyTheRequirementAndTheValue) {
  const std::chrono::seconds set{1};
  const std::vector<std::pair<GadgetOptions, std::string>> cases{
      {{.teeth = 0, .interval = set}, "Gadget: option 'teeth' expects a value >= 1, got 0; teeth: how many"},
      {{.teeth = 101, .interval = set}, "Gadget: option 'teeth' expects a value <= 100, got 101; teeth: how many"},
      {{.ratio = -0.5, .interval = set}, "Gadget: option 'ratio' expects a value > 0, got -0.5; ratio: gear ratio"},
      {{.label = "sprocket", .interval = set},
       "Gadget: option 'label' expects one of gear, cog, got 'sprocket'; label: name tag"},
      {{.threshold = INFINITY, .interval = set},
       "Gadget: option 'threshold' expects a finite number, got inf; threshold: stop above this"},
      {{.limit = 11, .interval = set},
       "Gadget: option 'limit' expects a value in [0, 10], got 11; limit: at most this many"},
      {{}, "Gadget: option 'interval' expects a value, got unset; interval: how often"},
  };
  for (const auto& [options, expected] : cases) {
    EXPECT_EQ(configuration_error_of([&] { options.validate(); }), expected);
  }
  // The same requirements guard parsed values.
  const auto parsed = values_of({{"teeth", "0"}, {"interval", "00:00:00:01"}});
  EXPECT_EQ(configuration_error_of([&] { GadgetOptions::schema().from(parsed); }),
            "Gadget: option 'teeth' expects a value >= 1, got 0; teeth: how many");
}

TEST(OptionSchema, AStructBuiltInCodeIsValidatedByTheSameDeclaration) {
  GadgetOptions built{.teeth = 5, .interval = std::chrono::seconds(3)};
  EXPECT_NO_THROW(built.validate());
  built.limit = -1;
  EXPECT_NE(configuration_error_of([&] { built.validate(); }).find("option 'limit' expects a value in [0, 10], got -1"),
            std::string::npos);
}

TEST(OptionSchema, DescribeShowsRequirements) {
  EXPECT_EQ(describe(spec_of("teeth")), "teeth (int, default 12, expects a value >= 1 and a value <= 100): how many");
  EXPECT_EQ(describe(spec_of("interval")), "interval (string, required, expects a duration DD:HH:MM:SS): how often");
}

// from() runs Options::validate() where there is one, so checks across keys apply to parsed values.
struct RangeOptions {
  int64_t low = 0;
  int64_t high = 10;
  static const OptionSchema<RangeOptions>& schema() {
    static const auto schema = OptionSchema<RangeOptions>("Range")
                                   .option("low", &RangeOptions::low, "first")
                                   .option("high", &RangeOptions::high, "last");
    return schema;
  }
  void validate() const {
    schema().validate(*this);
    check<ConfigurationError>(low <= high, "Range: expected low <= high, got ", low, " > ", high);
  }
};

TEST(OptionSchema, FromRunsTheStructsOwnValidate) {
  const auto specs = RangeOptions::schema().specs();
  EXPECT_EQ(RangeOptions::schema().from(OptionValues("range", specs, {{"low", "3"}})).low, 3);
  EXPECT_EQ(configuration_error_of([&] { RangeOptions::schema().from(OptionValues("range", specs, {{"low", "30"}})); }),
            "Range: expected low <= high, got 30 > 10");
}

TEST(OptionSchema, DoublesPrintShortAndReadBackExactly) {
  for (double value : {25.0, 0.999, 0.1, 1e-6, 1.0 / 3.0, 6.02214076e23, -0.0}) {
    const auto text = option_detail::format_double(value);
    EXPECT_EQ(std::stod(text), value) << text;
  }
  EXPECT_EQ(option_detail::format_double(25.0), "25");
  EXPECT_EQ(option_detail::format_double(0.999), "0.999");
}

}  // namespace
}  // namespace volt

namespace volt {
namespace {

// A value may be a comma-separated list: a piece without '=' continues the previous key's value.
// A command line's flags: members of a base struct too, a repeated key, a bare flag's implied
// value, and messages that name the key as a flag.
struct BaseFlags {
  int64_t workers = 2;
  bool verbose = false;
};
struct ToolFlags : BaseFlags {
  std::vector<std::string> plugins{"core"};
  std::optional<int64_t> retries;
  std::chrono::milliseconds wait{1500};

  static const OptionSchema<ToolFlags>& schema() {
    using O = ToolFlags;
    static const auto schema = OptionSchema<O>("tool", KeyNaming::Flag)
                                   .option("workers", &BaseFlags::workers, "threads", at_least<int64_t>(1))
                                   .option("verbose", &BaseFlags::verbose, "talk")
                                   .implicit_value("true")
                                   .repeated("plugin", &O::plugins, "what to load", "none")
                                   .option("retries", &O::retries, "how often", at_most<int64_t>(5))
                                   .option("wait", &O::wait, seconds_form(), "between tries");
    return schema;
  }
};

ToolFlags tool_flags(const std::map<std::string, std::vector<std::string>>& given) {
  return ToolFlags::schema().from(ToolFlags::schema().values(given));
}

TEST(OptionSchema, FlagsOfABaseStructAreDeclaredBesideTheirOwn) {
  const auto flags = tool_flags({{"workers", {"4"}}, {"verbose", {"true"}}, {"wait", {"0.25"}}});
  EXPECT_EQ(flags.workers, 4);
  EXPECT_TRUE(flags.verbose);
  EXPECT_EQ(flags.wait, std::chrono::milliseconds(250));
  const auto message = configuration_error_of([] { tool_flags({{"workers", {"0"}}}); });
  EXPECT_NE(message.find("--workers expects a value >= 1, got 0; --workers: threads"), std::string::npos) << message;
}

TEST(OptionSchema, ARepeatedKeyKeepsItsValuesInOrderAndItsEmptyWordClearsIt) {
  const auto specs = ToolFlags::schema().specs();
  EXPECT_TRUE(specs[2].repeatable);
  EXPECT_EQ(specs[2].default_value, "core");
  EXPECT_EQ(tool_flags({{"plugin", {"b", "a:x=1,y=2"}}}).plugins, (std::vector<std::string>{"b", "a:x=1,y=2"}));
  EXPECT_EQ(tool_flags({}).plugins, std::vector<std::string>{"core"});
  EXPECT_TRUE(tool_flags({{"plugin", {"none"}}}).plugins.empty());
  const auto beside = configuration_error_of([] { tool_flags({{"plugin", {"a", "none"}}}); });
  EXPECT_NE(beside.find("--plugin: 'none' (no value) stands alone"), std::string::npos) << beside;
  const auto twice = configuration_error_of([] { tool_flags({{"workers", {"1", "2"}}}); });
  EXPECT_NE(twice.find("--workers takes one value, got 2"), std::string::npos) << twice;
}

TEST(OptionSchema, AnImpliedValueMustParseAndIsDescribed) {
  EXPECT_EQ(ToolFlags::schema().specs()[1].implicit_value, "true");
  EXPECT_NE(describe(ToolFlags::schema().specs()[1]).find("bare means true"), std::string::npos);
  const auto message = configuration_error_of([] {
    OptionSchema<ToolFlags>("tool", KeyNaming::Flag).option("workers", &BaseFlags::workers, "n").implicit_value("x");
  });
  EXPECT_NE(message.find("--workers expects an int, got 'x'"), std::string::npos) << message;
}

TEST(OptionSchema, TextsWriteBackWhatReadsBackTheSameOptions) {
  ToolFlags flags;
  flags.workers = 7;
  flags.plugins = {};
  flags.wait = std::chrono::milliseconds(12500);
  const auto texts = ToolFlags::schema().texts(flags);
  ASSERT_EQ(texts.size(), 5u);
  EXPECT_EQ(texts[0].second, std::vector<std::string>{"7"});
  EXPECT_EQ(texts[2].second, std::vector<std::string>{"none"});
  EXPECT_FALSE(texts[3].second.has_value());  // retries: unset
  EXPECT_EQ(texts[4].second, std::vector<std::string>{"12.5"});
  std::map<std::string, std::vector<std::string>> given;
  for (const auto& [key, text] : texts) {
    if (text) given[key] = *text;
  }
  const auto back = tool_flags(given);
  EXPECT_EQ(back.workers, 7);
  EXPECT_TRUE(back.plugins.empty());
  EXPECT_FALSE(back.retries.has_value());
  EXPECT_EQ(back.wait, flags.wait);
}

TEST(NamedSpec, APieceWithoutEqualsContinuesThePreviousValue) {
  const auto spec = parse_named_spec("ddp:model_averaging_periods=2:4,8:8,start_local_sgd_iter=3", "--strategy");
  EXPECT_EQ(spec.name, "ddp");
  EXPECT_EQ(spec.values.at("model_averaging_periods"), "2:4,8:8");
  EXPECT_EQ(spec.values.at("start_local_sgd_iter"), "3");
  EXPECT_NE(testing::configuration_error_of([] { parse_named_spec("ddp:static_graph,x=1", "--strategy"); })
                .find("--strategy: expected key=value in 'ddp:static_graph,x=1', got 'static_graph'"),
            std::string::npos)
      << "before any key, a piece without '=' is still an error";
}

}  // namespace
}  // namespace volt

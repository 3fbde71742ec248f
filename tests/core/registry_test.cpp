// Registry<T, Args...>: factories with construction arguments, entries declared by a schema,
// canonical names, registration order, and option extensions (an entry that accepts the keys of
// the entry of another registry that one of its values names).
#include <gtest/gtest.h>

#include "core/error.h"
#include "tests/support/test_support.h"
#include "core/option_schema.h"
#include "core/registry.h"

namespace volt {
namespace {

using testing::configuration_error_of;

// ---- factories with extra arguments, schemas, canonical names ----

struct Lamp {
  std::string name;
  double watts = 0;
  int64_t socket = 0;    // the construction argument
  std::string room;      // the other construction argument
};

struct LampOptions {
  double watts = 40.0;
  static const OptionSchema<LampOptions>& schema() {
    static const auto schema =
        OptionSchema<LampOptions>("lamp").option("watts", &LampOptions::watts, "power", greater_than(0.0));
    return schema;
  }
  void validate() const { schema().validate(*this); }
};

using LampRegistry = Registry<Lamp, int64_t, const std::string&>;

int built = 0;

LampRegistry lamps() {
  LampRegistry registry("lamp", "--lamp");
  registry.add("bulb", "a bulb", LampOptions::schema(),
               [](const LampOptions& o, int64_t socket, const std::string& room) {
                 ++built;
                 return std::make_shared<Lamp>(Lamp{"bulb", o.watts, socket, room});
               });
  registry.add("candle", "no options", [](int64_t socket, const std::string& room) {
    return std::make_shared<Lamp>(Lamp{"candle", 0, socket, room});
  });
  registry.add_alias("bright", "bulb", {{"watts", "100"}}, "a bright bulb");
  return registry;
}

TEST(Registry, FactoriesReceiveTheirConstructionArguments) {
  const auto registry = lamps();
  const auto bulb = registry.create("bulb:watts=60", 3, "kitchen");
  EXPECT_EQ(bulb->watts, 60.0);
  EXPECT_EQ(bulb->socket, 3);
  EXPECT_EQ(bulb->room, "kitchen");
  const auto candle = registry.create("candle", 7, "hall");
  EXPECT_EQ(candle->name, "candle");
  EXPECT_EQ(candle->socket, 7);
  EXPECT_EQ(candle->room, "hall");
  EXPECT_EQ(registry.create("bulb", OptionContext{{"watts", "25"}}, 1, "attic")->watts, 25.0) << "context fills keys";
}

TEST(Registry, SchemaEntriesAreValidatedWhenParsedWithoutBuildingAnything) {
  const auto registry = lamps();
  const int before = built;
  EXPECT_EQ(configuration_error_of([&] { registry.parse("bulb:watts=0"); }),
            "lamp: option 'watts' expects a value > 0, got 0; watts: power");
  EXPECT_EQ(registry.parse("bulb:watts=5").get_double("watts"), 5.0);
  EXPECT_EQ(built, before);
  EXPECT_NE(registry.describe().find("watts (float, default 40, expects a value > 0): power"), std::string::npos)
      << registry.describe();
}

TEST(Registry, CanonicalNamesAndRegistrationOrder) {
  const auto registry = lamps();
  EXPECT_EQ(registry.canonical_name("bright"), "bulb");
  EXPECT_EQ(registry.canonical_name("bulb"), "bulb");
  EXPECT_EQ(registry.names(), (std::vector<std::string>{"bulb", "candle", "bright"}));
  EXPECT_EQ(registry.canonical_names(), (std::vector<std::string>{"bulb", "candle"}));
  EXPECT_EQ(registry.create("bright", 0, "")->watts, 100.0);
  EXPECT_EQ(registry.create("bright:watts=75", 0, "")->watts, 75.0);
  const auto message = configuration_error_of([&] { registry.canonical_name("bulp"); });
  EXPECT_NE(message.find("--lamp: unknown lamp 'bulp'; did you mean 'bulb'? Registered: bulb, candle, bright"),
            std::string::npos)
      << message;
  EXPECT_THROW(lamps().add_alias("dim", "bulb", {{"watt", "5"}}, "a typo in a preset"), ConfigurationError);
  EXPECT_THROW(lamps().add("bad name", "", {}, nullptr), ConfigurationError);
}

// ---- options validated once: by the registry, or by what it builds ----

// Counts Options::validate() calls; a heater, like a strategy, validates its options in its
// constructor (users build it from a struct too).
int heater_validations = 0;

struct HeaterOptions {
  double watts = 1000.0;
  static const OptionSchema<HeaterOptions>& schema(bool validated_by_the_heater) {
    static const auto plain =
        OptionSchema<HeaterOptions>("heater").option("watts", &HeaterOptions::watts, "power", greater_than(0.0));
    static const auto marked = OptionSchema<HeaterOptions>(plain).validated_by_what_it_builds();
    return validated_by_the_heater ? marked : plain;
  }
  void validate() const {
    ++heater_validations;
    schema(false).validate(*this);
  }
};

struct Heater {
  Heater(HeaterOptions options, bool validates) : watts(options.watts) {
    if (validates) options.validate();
  }
  double watts;
};

Registry<Heater> heaters(bool validated_by_the_heater) {
  Registry<Heater> registry("heater", "--heater");
  registry.add("radiator", "validates in its constructor when marked so",
               HeaterOptions::schema(validated_by_the_heater), [validated_by_the_heater](const HeaterOptions& o) {
                 return std::make_shared<Heater>(o, validated_by_the_heater);
               });
  return registry;
}

TEST(RegistryValidation, AnEntryMarkedValidatedByWhatItBuildsIsValidatedOnceByItsConstructor) {
  const auto marked = heaters(true);
  heater_validations = 0;
  EXPECT_EQ(marked.create("radiator:watts=500")->watts, 500.0);
  EXPECT_EQ(heater_validations, 1) << "the registry reads the values; the constructor validates them once";
  heater_validations = 0;
  EXPECT_EQ(configuration_error_of([&] { marked.create("radiator:watts=-1"); }),
            "heater: option 'watts' expects a value > 0, got -1; watts: power");
  EXPECT_EQ(heater_validations, 1) << "the bad value is refused by the constructor's validation, once";
}

TEST(RegistryValidation, AnUnmarkedEntryIsValidatedOnceByTheRegistry) {
  const auto plain = heaters(false);
  heater_validations = 0;
  EXPECT_EQ(plain.create("radiator:watts=750")->watts, 750.0);
  EXPECT_EQ(heater_validations, 1) << "the registry validates before building";
  heater_validations = 0;
  EXPECT_THROW(plain.create("radiator:watts=0"), ConfigurationError);
  EXPECT_EQ(heater_validations, 1);
  heater_validations = 0;
  EXPECT_THROW(plain.parse("radiator:watts=0"), ConfigurationError);
  EXPECT_EQ(heater_validations, 1) << "parse() validates without building";
}

// ---- option extension ----

struct Engine {
  std::string kind;
  double torque = 0;
  int64_t cylinders = 0;
};

struct DieselOptions {
  double torque = 300.0;
  static const OptionSchema<DieselOptions>& schema() {
    static const auto schema = OptionSchema<DieselOptions>("diesel")
                                   .option("torque", &DieselOptions::torque, "newton metres", at_least(1.0))
                                   .alias("nm");
    return schema;
  }
};

struct V8Options {
  int64_t cylinders = 8;
  static const OptionSchema<V8Options>& schema() {
    static const auto schema =
        OptionSchema<V8Options>("v8").option("cylinders", &V8Options::cylinders, "how many", in_range<int64_t>(4, 12));
    return schema;
  }
};

Registry<Engine>& engines() {
  static Registry<Engine> registry = [] {
    Registry<Engine> r("engine", "--car engine");
    r.add("petrol", "the default, no options", [] { return std::make_shared<Engine>(Engine{"petrol"}); });
    r.add("diesel", "torque", DieselOptions::schema(),
          [](const DieselOptions& o) { return std::make_shared<Engine>(Engine{"diesel", o.torque}); });
    r.add("v8", "cylinders", V8Options::schema(),
          [](const V8Options& o) { return std::make_shared<Engine>(Engine{"v8", 0, o.cylinders}); });
    r.add_alias("tractor", "diesel", {{"torque", "900"}}, "a strong diesel");
    return r;
  }();
  return registry;
}

struct Car {
  int64_t seats;
  std::shared_ptr<Engine> engine;
};

struct CarOptions {
  int64_t seats = 4;
  std::string engine = "petrol";
  static const OptionSchema<CarOptions>& schema() {
    static const auto schema = OptionSchema<CarOptions>("car")
                                   .option("seats", &CarOptions::seats, "how many", at_least(1))
                                   .option("engine", &CarOptions::engine, "what drives it");
    return schema;
  }
};

Registry<Car> cars() {
  Registry<Car> registry("vehicle", "--vehicle");
  registry.add("car", "a car", CarOptions::schema(), [](const CarOptions& o, const OptionValues& values) {
    return std::make_shared<Car>(Car{o.seats, engines().create(o.engine, values)});
  });
  registry.extend_options("car", "engine", engines());
  registry.add_alias("van", "car", {{"seats", "9"}, {"engine", "diesel"}, {"torque", "500"}}, "a diesel van");
  return registry;
}

TEST(RegistryExtension, TheNamedEntrysKeysAreAcceptedAndBuiltFromTheSameValues) {
  const auto registry = cars();
  auto car = registry.create("car");
  EXPECT_EQ(car->engine->kind, "petrol");
  car = registry.create("car:engine=diesel,torque=450,seats=2");
  EXPECT_EQ(car->seats, 2);
  EXPECT_EQ(car->engine->kind, "diesel");
  EXPECT_EQ(car->engine->torque, 450.0);
  EXPECT_EQ(registry.create("car:engine=diesel")->engine->torque, 300.0) << "the engine's own default";
  EXPECT_EQ(registry.create("car:engine=diesel,nm=250")->engine->torque, 250.0) << "the engine key's alias";
  EXPECT_EQ(registry.create("car:engine=v8,cylinders=6")->engine->cylinders, 6);
  EXPECT_EQ(registry.create("car:engine=tractor")->engine->torque, 900.0) << "an alias entry's presets";
  const auto van = registry.create("van");
  EXPECT_EQ(van->seats, 9);
  EXPECT_EQ(van->engine->torque, 500.0) << "an alias may preset the extension's keys";
}

TEST(RegistryExtension, AKeyIsAcceptedOnlyWithTheEntryThatDeclaresIt) {
  const auto registry = cars();
  auto message = configuration_error_of([&] { registry.create("car:torque=450"); });
  EXPECT_EQ(message,
            "vehicle 'car': option 'torque' belongs to engine 'diesel', but engine is 'petrol'; add engine=diesel or "
            "remove 'torque'");
  message = configuration_error_of([&] { registry.create("car:engine=v8,torque=450"); });
  EXPECT_NE(message.find("belongs to engine 'diesel', but engine is 'v8'"), std::string::npos) << message;
  message = configuration_error_of([&] { registry.create("car:engine=diesel,torq=1"); });
  EXPECT_NE(message.find("unknown option 'torq'; did you mean 'torque'? Valid options: seats, engine, torque, nm"),
            std::string::npos)
      << message;
  message = configuration_error_of([&] { registry.create("car:engine=steam"); });
  EXPECT_NE(message.find("option 'engine' names an unknown engine 'steam'"), std::string::npos) << message;
  EXPECT_NE(message.find("Registered: petrol, diesel, v8, tractor"), std::string::npos) << message;
}

TEST(RegistryExtension, TheExtensionsKeysAreValidatedByTheirOwnDeclaration) {
  const auto registry = cars();
  EXPECT_EQ(configuration_error_of([&] { registry.parse("car:engine=diesel,torque=0.5"); }),
            "diesel: option 'torque' expects a value >= 1, got 0.5; torque: newton metres");
  EXPECT_EQ(configuration_error_of([&] { registry.create("car:engine=v8,cylinders=3"); }),
            "v8: option 'cylinders' expects a value in [4, 12], got 3; cylinders: how many");
  const auto not_a_number = configuration_error_of([&] { registry.create("car:engine=v8,cylinders=many"); });
  EXPECT_NE(not_a_number.find("option 'cylinders' expects an int, got 'many'"), std::string::npos) << not_a_number;
}

TEST(RegistryExtension, DescribeListsEachEntrysKeysUnderTheExtendingEntry) {
  const auto text = cars().describe();
  for (const char* line : {"car  a car\n", "    engine (string, default petrol): what drives it\n",
                           "    with engine=petrol: the default, no options (no options)\n",
                           "    with engine=diesel: torque\n",
                           "        torque (float, default 300, alias nm, expects a value >= 1): newton metres\n",
                           "    with engine=v8: cylinders\n",
                           "        cylinders (int, default 8, expects a value in [4, 12]): how many\n",
                           "    with engine=tractor: a strong diesel (alias of diesel)\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << " missing from:\n" << text;
  }
}

}  // namespace
}  // namespace volt

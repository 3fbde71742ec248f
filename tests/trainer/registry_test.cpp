// Names become objects only through a Registry: typed options with defaults, aliases, user
// registrations, and errors that list what is valid and the closest match.
#include <gtest/gtest.h>

#include "strategies/single_device_strategy.h"
#include "strategies/strategy_registry.h"
#include "tests/support/regression_problem.h"
#include "tests/support/test_support.h"
#include "core/registry.h"

namespace volt {
namespace {

struct Widget {
  int64_t size;
  double ratio;
  bool shiny;
  std::string label;
};

Registry<Widget> widgets() {
  Registry<Widget> registry("widget", "--widget");
  registry.add("gear", "a gear",
               {{"size", OptionType::Int, "3", "teeth"},
                {"ratio", OptionType::Double, "0.5", "gear ratio"},
                {"shiny", OptionType::Bool, "false", "polished"},
                {"label", OptionType::String, "", "name tag"}},
               [](const OptionValues& o) {
                 return std::make_shared<Widget>(
                     Widget{o.get_int("size"), o.get_double("ratio"), o.get_bool("shiny"), o.get_string("label")});
               });
  registry.add_alias("big_gear", "gear", {{"size", "100"}}, "a gear with 100 teeth");
  return registry;
}

std::string error_for(const std::function<void()>& body) {
  try {
    body();
  } catch (const ConfigurationError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a ConfigurationError";
  return "";
}

TEST(Registry, ParsesTypedOptionsWithDefaults) {
  const auto registry = widgets();
  auto w = registry.create("gear");
  EXPECT_EQ(w->size, 3);
  EXPECT_DOUBLE_EQ(w->ratio, 0.5);
  EXPECT_FALSE(w->shiny);
  w = registry.create("gear:size=1e3,ratio=0.25,shiny=true,label=x");
  EXPECT_EQ(w->size, 1000);
  EXPECT_DOUBLE_EQ(w->ratio, 0.25);
  EXPECT_TRUE(w->shiny);
  EXPECT_EQ(w->label, "x");
}

TEST(Registry, AliasesPresetValuesTheUserMayOverride) {
  const auto registry = widgets();
  EXPECT_EQ(registry.create("big_gear")->size, 100);
  EXPECT_EQ(registry.create("big_gear:size=7")->size, 7);
  EXPECT_NE(registry.describe().find("alias of gear, size=100"), std::string::npos) << registry.describe();
}

TEST(Registry, ErrorsListWhatIsValidAndTheClosestMatch) {
  const auto registry = widgets();
  auto message = error_for([&] { registry.create("gaer"); });
  EXPECT_NE(message.find("gear"), std::string::npos) << message;
  message = error_for([&] { registry.create("gear:sise=3"); });
  EXPECT_NE(message.find("size"), std::string::npos) << message;
  message = error_for([&] { registry.create("gear:size=big"); });
  EXPECT_NE(message.find("big"), std::string::npos) << message;
  EXPECT_NE(message.find("size"), std::string::npos) << message;
  message = error_for([&] { registry.create("gear:shiny=maybe"); });
  EXPECT_NE(message.find("maybe"), std::string::npos) << message;
  message = error_for([&] { registry.create("gear:size"); });
  EXPECT_NE(message.find("--widget"), std::string::npos) << message;
  EXPECT_THROW(widgets().add("gear", "again", {}, nullptr), ConfigurationError);
}

TEST(Registry, DescribeListsOptionsWithTypesDefaultsAndHelp) {
  const auto text = widgets().describe();
  EXPECT_NE(text.find("size (int, default 3): teeth"), std::string::npos) << text;
}

// A user strategy registered by name, without touching volt, and chosen through the options.
class CountingStrategy : public SingleDeviceStrategy {
 public:
  explicit CountingStrategy(int64_t tag) : tag(tag) {}
  std::string name() const override { return "counting"; }
  ScopeGuard no_sync() override {
    ++no_syncs;
    return {};
  }
  int64_t tag;
  int no_syncs = 0;
};

TEST(Registry, UsersRegisterTheirOwnStrategies) {
  static std::shared_ptr<CountingStrategy> built;
  if (!strategy_registry().contains("counting")) {
    strategy_registry().add("counting", "counts no_sync scopes", {{"tag", OptionType::Int, "0", "a number"}},
                            [](const OptionValues& o) {
                              built = std::make_shared<CountingStrategy>(o.get_int("tag"));
                              return built;
                            });
  }
  testing::TemporaryDirectory dir;
  auto options = testing::quiet_options(dir.path());
  options.strategy = "counting:tag=5";
  options.max_epochs = 1;
  options.accumulate_grad_batches = 2;
  Trainer trainer(options);
  ASSERT_TRUE(built);
  EXPECT_EQ(built->tag, 5);
  trainer.fit(std::make_shared<testing::RegressionModule>(), std::make_shared<testing::RegressionData>(32, 8));
  EXPECT_EQ(built->no_syncs, 2);
  EXPECT_NE(strategy_registry().describe().find("counting"), std::string::npos);
}

TEST(Registry, AnUnknownStrategyFailsAtTrainerConstruction) {
  testing::TemporaryDirectory dir;
  auto options = testing::quiet_options(dir.path());
  options.strategy = "single_devce";
  const auto message = error_for([&] { Trainer trainer(options); });
  EXPECT_NE(message.find("single_device"), std::string::npos) << message;
}

}  // namespace
}  // namespace volt

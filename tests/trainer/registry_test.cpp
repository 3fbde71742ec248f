// Names become objects only through a Registry: typed options with defaults, aliases, user
// registrations, and errors that list what is valid and the closest match.
#include <gtest/gtest.h>

#include "precision/precision_registry.h"
#include "strategies/ddp/ddp_strategy.h"
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

std::string error_for(const std::function<void()>& body) { return testing::configuration_error_of(body); }

// A quiet one-epoch fit in `dir` with `accumulate` micro-batches per optimizer step.
TrainerOptions one_epoch(const testing::TemporaryDirectory& dir, int64_t accumulate = 1) {
  auto options = testing::quiet_options(dir.path());
  options.max_epochs = 1;
  options.accumulate_grad_batches = accumulate;
  return options;
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
  explicit CountingStrategy(int64_t tag) : tag(tag) { hold(std::make_shared<Counter>(*this)); }
  std::string name() const override { return "counting"; }
  int64_t tag;
  int no_syncs = 0;

 private:
  struct Counter : GradientSynchronization {
    explicit Counter(CountingStrategy& owner) : GradientSynchronization(owner), counting(owner) {}
    ScopeGuard no_sync() override {
      ++counting.no_syncs;
      return {};
    }
    CountingStrategy& counting;
  };
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
  auto options = one_epoch(dir, 2);
  options.strategy = "counting:tag=5";
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


// ---- ddp's comm_hook key, extended with the comm-hook registry ----

// A user's hook: the default all-reduce, counting its buckets and recording its option.
struct TaggedHookOptions {
  int64_t tag = 1;
  static const OptionSchema<TaggedHookOptions>& schema() {
    static const auto schema = OptionSchema<TaggedHookOptions>("--strategy ddp:comm_hook=tagged_allreduce")
                                   .option("tag", &TaggedHookOptions::tag, "a number the hook records", at_least(1));
    return schema;
  }
};

struct TaggedHookRecord {
  int64_t buckets = 0;
  int64_t tag = 0;
};
TaggedHookRecord tagged_hook_record;

class TaggedHook : public ddp::AllReduceHook {
 public:
  TaggedHook(Communicator& communicator, int64_t tag) : AllReduceHook(communicator), tag_(tag) {}
  std::string name() const override { return "tagged_allreduce"; }
  CollectiveHandle run(ddp::GradBucket& bucket) override {
    ++tagged_hook_record.buckets;
    tagged_hook_record.tag = tag_;
    return AllReduceHook::run(bucket);
  }

 private:
  int64_t tag_;
};

void register_tagged_hook() {
  if (ddp::comm_hook_registry().contains("tagged_allreduce")) return;
  ddp::add_comm_hook(ddp::comm_hook_registry(), "tagged_allreduce", "all-reduce that records its tag",
                     TaggedHookOptions::schema(), [](Communicator& communicator, const TaggedHookOptions& options) {
                       return std::make_unique<TaggedHook>(communicator, options.tag);
                     });
}

TEST(CommHookExtension, DDPAcceptsTheCommHookKeyAndItsAlias) {
  auto ddp = std::dynamic_pointer_cast<DDPStrategy>(strategy_registry().create("ddp:comm_hook=allreduce"));
  ASSERT_NE(ddp, nullptr);
  EXPECT_EQ(ddp->options().comm_hook, "allreduce");
  EXPECT_EQ(std::dynamic_pointer_cast<DDPStrategy>(strategy_registry().create("ddp"))->options().comm_hook,
            "allreduce");
  register_tagged_hook();
  ddp = std::dynamic_pointer_cast<DDPStrategy>(strategy_registry().create("ddp:ddp_comm_hook=tagged_allreduce"));
  EXPECT_EQ(ddp->options().comm_hook, "tagged_allreduce");
  const auto unknown = error_for([] { strategy_registry().create("ddp:comm_hook=allreduc"); });
  EXPECT_NE(unknown.find("unknown comm hook 'allreduc'; did you mean 'allreduce'?"), std::string::npos) << unknown;
  const auto twice = error_for([] { strategy_registry().create("ddp:comm_hook=allreduce,ddp_comm_hook=allreduce"); });
  EXPECT_NE(twice.find("option 'comm_hook' is given twice"), std::string::npos) << twice;
}

TEST(CommHookExtension, AHookKeyIsAcceptedOnlyWithItsHookAndValidatedByItsDeclaration) {
  register_tagged_hook();
  EXPECT_NO_THROW(strategy_registry().create("ddp:comm_hook=tagged_allreduce,tag=3"));
  EXPECT_NO_THROW(strategy_registry().create("ddp_find_unused_parameters_true:comm_hook=tagged_allreduce,tag=3"));
  auto message = error_for([] { strategy_registry().create("ddp:tag=3"); });
  EXPECT_NE(message.find("option 'tag' belongs to comm hook 'tagged_allreduce', but comm_hook is 'allreduce'; add "
                         "comm_hook=tagged_allreduce"),
            std::string::npos)
      << message;
  message = error_for([] { strategy_registry().create("ddp:comm_hook=tagged_allreduce,tag=0"); });
  EXPECT_NE(message.find("option 'tag' expects a value >= 1, got 0"), std::string::npos) << message;
  message = error_for([] { strategy_registry().create("ddp:comm_hook=tagged_allreduce,tags=2"); });
  EXPECT_NE(message.find("did you mean 'tag'?"), std::string::npos) << message;
  EXPECT_NE(message.find("Valid options: bucket_cap_mb, static_graph, gradient_as_bucket_view, "
                         "find_unused_parameters, broadcast_buffers, activation_checkpointing, comm_hook, ddp_comm_hook, comm_wrapper, "
                         "ddp_comm_wrapper, shard_optimizer, zero_optimizer, state_dict_type, tag"),
            std::string::npos)
      << message;
}

TEST(CommHookExtension, ListStrategiesShowsEachHookWithItsKeys) {
  register_tagged_hook();
  try {
    testing::options_from_args({"--list-strategies"});
    FAIL() << "expected HelpRequested";
  } catch (const HelpRequested& help) {
    const std::string text = help.what();
    for (const char* line :
         {"    comm_hook (string, default allreduce, alias ddp_comm_hook, expects a registered comm hook",
          "    with comm_hook=allreduce: divide by the world size, then sum over the ranks",
          "    with comm_hook=tagged_allreduce: all-reduce that records its tag\n",
          "        tag (int, default 1, expects a value >= 1): a number the hook records\n"}) {
      EXPECT_NE(text.find(line), std::string::npos) << line << " missing from:\n" << text;
    }
  }
}

// The hook a user registered, chosen with its option on the command line, reduces every bucket.
TEST(CommHookExtension, AUserRegisteredHookRunsWithItsOptionsInTraining) {
  register_tagged_hook();
  tagged_hook_record = {};
  testing::TemporaryDirectory dir;
  auto options = one_epoch(dir);
  options.strategy = "ddp:comm_hook=tagged_allreduce,tag=7";
  Trainer trainer(options);
  auto module = std::make_shared<testing::RegressionModule>();
  trainer.fit(module, std::make_shared<testing::RegressionData>(32, 8));
  EXPECT_EQ(module->optimizer_steps, 4);
  EXPECT_EQ(tagged_hook_record.tag, 7);
  EXPECT_EQ(tagged_hook_record.buckets, 4) << "one bucket (9 parameters) per step";
}

// A hook set from code before setup replaces the one the options name.
TEST(CommHookExtension, SetCommHookBeforeSetupStillTakesEffect) {
  tagged_hook_record = {};
  auto ddp = std::make_shared<DDPStrategy>();
  ddp->set_comm_hook([](Communicator& communicator) { return std::make_unique<TaggedHook>(communicator, 11); });
  testing::TemporaryDirectory dir;
  Trainer trainer(one_epoch(dir), ddp);
  trainer.fit(std::make_shared<testing::RegressionModule>(), std::make_shared<testing::RegressionData>(16, 8));
  EXPECT_EQ(tagged_hook_record.tag, 11);
  EXPECT_EQ(tagged_hook_record.buckets, 2);
}

// ---- a user's precision ----

class CountingPrecision : public Precision {
 public:
  std::string name() const override { return "counting-32"; }
  void backward(const torch::Tensor& loss) override {
    ++backwards;
    Precision::backward(loss);
  }
  int64_t backwards = 0;
};

TEST(PrecisionRegistry, UsersRegisterTheirOwnPrecisionByName) {
  static std::shared_ptr<CountingPrecision> built;
  if (!precision_registry().contains("counting-32")) {
    precision_registry().add("counting-32", "float32, counting backward calls", [](const torch::Device&) {
      built = std::make_shared<CountingPrecision>();
      return built;
    });
    precision_registry().add_alias("counting", "counting-32", {}, "short name");
  }
  EXPECT_EQ(canonical_precision_name("counting"), "counting-32");
  const auto& names = precision_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "counting-32"), names.end());
  EXPECT_EQ(std::find(names.begin(), names.end(), "counting"), names.end()) << "aliases are not canonical names";
  EXPECT_EQ(std::vector<std::string>(names.begin(), names.begin() + 6),
            (std::vector<std::string>{"32-true", "64-true", "bf16-mixed", "16-mixed", "bf16-true", "16-true"}));

  testing::TemporaryDirectory dir;
  auto options = one_epoch(dir, 2);
  options.precision = "counting";
  Trainer trainer(options);
  trainer.fit(std::make_shared<testing::RegressionModule>(), std::make_shared<testing::RegressionData>(32, 8));
  ASSERT_TRUE(built);
  EXPECT_EQ(built->backwards, 4) << "every micro-batch's backward goes through the registered precision";
}

}  // namespace
}  // namespace volt

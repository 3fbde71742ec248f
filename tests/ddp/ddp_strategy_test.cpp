// The ddp strategy's registration and options, and the model check its setup runs.
#include <gtest/gtest.h>

#include "strategies/ddp/ddp_strategy.h"
#include "strategies/model_agreement.h"
#include "strategies/strategy_registry.h"
#include "tests/distributed/thread_ranks.h"
#include "core/error.h"

namespace volt {
namespace {

std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(DDPRegistrationTest, OptionsParseWithDefaultsAndTheAliasPresetsFindUnused) {
  auto& registry = strategy_registry();
  auto plain = std::dynamic_pointer_cast<DDPStrategy>(registry.create("ddp"));
  ASSERT_NE(plain, nullptr);
  EXPECT_EQ(plain->options().bucket_cap_mb, 25.0);
  EXPECT_TRUE(plain->options().broadcast_buffers);
  EXPECT_FALSE(plain->options().find_unused_parameters);
  EXPECT_FALSE(plain->options().static_graph);
  EXPECT_FALSE(plain->options().gradient_as_bucket_view);
  EXPECT_TRUE(plain->is_distributed());

  auto tuned = std::dynamic_pointer_cast<DDPStrategy>(
      registry.create("ddp:bucket_cap_mb=10,static_graph=true,gradient_as_bucket_view=true,broadcast_buffers=false"));
  ASSERT_NE(tuned, nullptr);
  EXPECT_EQ(tuned->options().bucket_cap_mb, 10.0);
  EXPECT_TRUE(tuned->options().static_graph);
  EXPECT_TRUE(tuned->options().gradient_as_bucket_view);
  EXPECT_FALSE(tuned->options().broadcast_buffers);

  auto alias = std::dynamic_pointer_cast<DDPStrategy>(registry.create("ddp_find_unused_parameters_true"));
  ASSERT_NE(alias, nullptr);
  EXPECT_TRUE(alias->options().find_unused_parameters);
}

TEST(DDPRegistrationTest, BadKeysAndValuesAreNamed) {
  auto& registry = strategy_registry();
  const auto unknown = error_of([&] { registry.create("ddp:bucket_cap=10"); });
  EXPECT_NE(unknown.find("bucket_cap"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("bucket_cap_mb"), std::string::npos) << "the closest key is suggested: " << unknown;
  const auto bad = error_of([&] { registry.create("ddp:static_graph=maybe"); });
  EXPECT_NE(bad.find("maybe"), std::string::npos) << bad;
  const auto negative = error_of([&] { registry.create("ddp:bucket_cap_mb=-1"); });
  EXPECT_NE(negative.find("option 'bucket_cap_mb' expects a value > 0, got -1"), std::string::npos) << negative;
}

TEST(DDPRegistrationTest, AutoPicksDDPForSeveralProcesses) {
  EXPECT_EQ(create_strategy("auto", 2, "test")->name(), "ddp");
  EXPECT_EQ(create_strategy("auto", 1, "test")->name(), "single_device");
}

// Strategies see a plain torch::nn::Module (the strategy layer knows nothing of volt::Module).
struct Small : torch::nn::Module {
  torch::nn::Linear fc{nullptr};
  explicit Small(int64_t width) { fc = register_module("fc", torch::nn::Linear(4, width)); }
};

TEST(ModelAgreementTest, RanksWithDifferentModelsFailNamingTheFirstDifference) {
  std::vector<std::shared_ptr<Small>> models{std::make_shared<Small>(3), std::make_shared<Small>(5),
                                             std::make_shared<Small>(3)};
  const auto errors = testing::run_thread_ranks(3, [&](int64_t rank, int64_t port) {
    auto comm = Communicator::connect(testing::loopback_options(rank, 3, port));
    verify_same_model(*comm, *models[static_cast<size_t>(rank)]);
  });
  for (const auto& e : errors) EXPECT_NE(e.find("the model on rank(s) 1 differs from rank 0's"), std::string::npos) << e;
  EXPECT_NE(errors[1].find("rank 0 has 'parameter fc.weight float [3, 4]', this rank 'parameter fc.weight float [5, 4]'"),
            std::string::npos)
      << errors[1];
}

TEST(ModelAgreementTest, IdenticalModelsPass) {
  std::vector<std::shared_ptr<Small>> models{std::make_shared<Small>(3), std::make_shared<Small>(3)};
  const auto errors = testing::run_thread_ranks(2, [&](int64_t rank, int64_t port) {
    auto comm = Communicator::connect(testing::loopback_options(rank, 2, port));
    verify_same_model(*comm, *models[static_cast<size_t>(rank)]);
  });
  EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
}

}  // namespace
}  // namespace volt

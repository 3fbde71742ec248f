// The Precision objects on their own: which name selects what, what each does to a module, a
// batch and the forward, and the errors for precisions a device cannot run.
#include <gtest/gtest.h>

#include "core/compat.h"
#include "core/error.h"
#include "precision/autocast.h"
#include "precision/mixed_precision.h"
#include "precision/true_precision.h"

namespace volt::testing {
namespace {

TEST(PrecisionNames, CanonicalNamesAndLightningAliases) {
  EXPECT_EQ(precision_names(),
            (std::vector<std::string>{"32-true", "64-true", "bf16-mixed", "16-mixed", "bf16-true", "16-true"}));
  EXPECT_EQ(canonical_precision_name("32"), "32-true");
  EXPECT_EQ(canonical_precision_name("64"), "64-true");
  EXPECT_EQ(canonical_precision_name("16"), "16-mixed");
  EXPECT_EQ(canonical_precision_name("bf16"), "bf16-mixed");
  EXPECT_EQ(canonical_precision_name("bf16-true"), "bf16-true");
  try {
    canonical_precision_name("bf16-mix");
    FAIL() << "expected ConfigurationError";
  } catch (const ConfigurationError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("'bf16-mix'"), std::string::npos) << message;
    EXPECT_NE(message.find("did you mean 'bf16-mixed'"), std::string::npos) << message;
    EXPECT_NE(message.find("16-true"), std::string::npos) << "lists the valid values: " << message;
  }
}

TEST(MakePrecision, EachNameSelectsItsPrecisionOnCpu) {
  const torch::Device cpu(torch::kCPU);
  for (const auto& name : {"32-true", "64-true", "bf16-mixed", "bf16-true", "32", "64", "bf16"}) {
    EXPECT_EQ(make_precision(name, cpu)->name(), canonical_precision_name(name)) << name;
  }
  auto bf16_mixed = std::dynamic_pointer_cast<MixedPrecision>(make_precision("bf16-mixed", cpu));
  ASSERT_NE(bf16_mixed, nullptr);
  EXPECT_EQ(bf16_mixed->scaler(), nullptr) << "bfloat16 has float32's range: no loss scaling by default";
  auto f64 = std::dynamic_pointer_cast<TruePrecision>(make_precision("64-true", cpu));
  ASSERT_NE(f64, nullptr);
  EXPECT_EQ(f64->dtype(), torch::kDouble);
  // The dtype matrix products run in (a device's peak FLOP/s is looked up by it).
  EXPECT_EQ(make_precision("bf16-mixed", cpu)->compute_dtype(), torch::kBFloat16);
  EXPECT_EQ(make_precision("bf16-true", cpu)->compute_dtype(), torch::kBFloat16);
  EXPECT_EQ(make_precision("32-true", cpu)->compute_dtype(), torch::kFloat);
}

TEST(MakePrecision, Float16MixedWithoutCudaSuggestsBf16Mixed) {
  for (const auto& name : {"16-mixed", "16"}) {
    try {
      make_precision(name, torch::kCPU);
      FAIL() << "expected NotSupportedError for " << name;
    } catch (const NotSupportedError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("CUDA"), std::string::npos) << message;
      EXPECT_NE(message.find("--precision bf16-mixed"), std::string::npos) << message;
    }
  }
  EXPECT_THROW(MixedPrecision(torch::kHalf, torch::kCPU), NotSupportedError);
  EXPECT_THROW(MixedPrecision(torch::kFloat, torch::kCPU), ConfigurationError);
  EXPECT_THROW(TruePrecision(torch::kFloat), ConfigurationError);
}

TEST(MakePrecision, Float16TrueIsAvailableExactlyWhenLibTorchMultipliesFloat16OnCpu) {
  bool half_matmul = true;
  try {
    const auto a = torch::ones({2, 2}, torch::kHalf);
    torch::mm(a, a);
  } catch (const c10::Error&) {
    half_matmul = false;
  }
  if (half_matmul) {
    EXPECT_EQ(make_precision("16-true", torch::kCPU)->name(), "16-true");
  } else {
    try {
      make_precision("16-true", torch::kCPU);
      FAIL() << "expected NotSupportedError";
    } catch (const NotSupportedError& e) {
      EXPECT_NE(std::string(e.what()).find("--precision bf16-true"), std::string::npos) << e.what();
    }
  }
}

TEST(Autocast, Bf16MixedRunsMatmulsInBfloat16InsideTheContextOnly) {
  torch::manual_seed(0);
  torch::nn::Linear linear(4, 3);
  const auto x = torch::randn({2, 4});
  MixedPrecision precision(torch::kBFloat16, torch::kCPU);
  torch::Tensor inside;
  {
    auto context = precision.forward_context();
    EXPECT_TRUE(compat::autocast_enabled(torch::kCPU));
    inside = linear->forward(x);
    EXPECT_EQ(inside.scalar_type(), torch::kBFloat16);
    // A float32 op that autocast does not lower keeps float32.
    EXPECT_EQ((x + 1).scalar_type(), torch::kFloat);
  }
  EXPECT_FALSE(compat::autocast_enabled(torch::kCPU));
  EXPECT_EQ(linear->forward(x).scalar_type(), torch::kFloat);
  // The result is float32's up to bfloat16 rounding, and gradients reach the float32 weights.
  EXPECT_TRUE(torch::allclose(inside.to(torch::kFloat), linear->forward(x), 2e-2, 2e-2));
  inside.to(torch::kFloat).sum().backward();
  EXPECT_EQ(linear->weight.grad().scalar_type(), torch::kFloat);
  EXPECT_EQ(linear->weight.scalar_type(), torch::kFloat);
}

TEST(Autocast, NestedScopesRestoreThePreviousState) {
  const auto dtype_before = compat::autocast_dtype(torch::kCPU);
  {
    auto outer = autocast_scope(torch::kCPU, torch::kBFloat16);
    {
      auto inner = autocast_scope(torch::kCPU, torch::kBFloat16);
      EXPECT_TRUE(compat::autocast_enabled(torch::kCPU));
    }
    EXPECT_TRUE(compat::autocast_enabled(torch::kCPU)) << "the inner scope restores the outer one";
    EXPECT_EQ(compat::autocast_dtype(torch::kCPU), torch::kBFloat16);
  }
  EXPECT_FALSE(compat::autocast_enabled(torch::kCPU));
  EXPECT_EQ(compat::autocast_dtype(torch::kCPU), dtype_before);
}

TEST(TruePrecision, Float64CastsFloatingParametersBuffersAndInputsOnly) {
  torch::nn::Sequential module(torch::nn::Linear(3, 2), torch::nn::BatchNorm1d(2));
  TruePrecision precision(torch::kDouble);
  precision.convert_module(*module);
  for (const auto& p : module->parameters()) EXPECT_EQ(p.scalar_type(), torch::kDouble);
  for (const auto& item : module->named_buffers()) {
    const bool counter = item.key().find("num_batches_tracked") != std::string::npos;
    EXPECT_EQ(item.value().scalar_type(), counter ? torch::kLong : torch::kDouble) << item.key();
  }
  Batch batch{torch::ones({4, 3}), torch::tensor({0, 1, 0, 1}), {{"weight", torch::ones({4})}, {"ids", torch::arange(4)}}};
  const auto converted = precision.convert_input(batch);
  EXPECT_EQ(converted.input.scalar_type(), torch::kDouble);
  EXPECT_EQ(converted.target.scalar_type(), torch::kLong);
  EXPECT_EQ(converted.extras.at("weight").scalar_type(), torch::kDouble);
  EXPECT_EQ(converted.extras.at("ids").scalar_type(), torch::kLong);
  EXPECT_EQ(module->forward(converted.input).scalar_type(), torch::kDouble);
  {
    auto context = precision.forward_context();
    EXPECT_EQ(torch::ones({1}).scalar_type(), torch::kDouble) << "64-true: new tensors are float64";
  }
  EXPECT_EQ(torch::ones({1}).scalar_type(), torch::kFloat);
}

TEST(TruePrecision, Bf16CastsTheModuleAndLeavesTheDefaultDtype) {
  torch::nn::Linear module(3, 2);
  TruePrecision precision(torch::kBFloat16);
  EXPECT_EQ(precision.name(), "bf16-true");
  precision.convert_module(*module);
  EXPECT_EQ(module->weight.scalar_type(), torch::kBFloat16);
  const auto batch = precision.convert_input(Batch{torch::ones({2, 3}), torch::ones({2, 2})});
  EXPECT_EQ(batch.target.scalar_type(), torch::kBFloat16);
  auto context = precision.forward_context();
  EXPECT_EQ(module->forward(batch.input).scalar_type(), torch::kBFloat16);
  EXPECT_EQ(torch::ones({1}).scalar_type(), torch::kFloat);
}

TEST(MixedPrecision, MetricsAndStateComeFromTheScaler) {
  MixedPrecision plain(torch::kBFloat16, torch::kCPU);
  EXPECT_TRUE(plain.metrics().empty());
  EXPECT_TRUE(plain.state_dict().empty());

  auto scaler = std::make_shared<GradScaler>(GradScalerOptions{.init_scale = 1024.0});
  MixedPrecision scaled(torch::kBFloat16, torch::kCPU, scaler);
  EXPECT_EQ(scaled.metrics(), (std::map<std::string, double>{{"amp_scale", 1024.0}, {"amp_skipped_steps", 0.0}}));
  const auto state = scaled.state_dict();
  EXPECT_EQ(state.at("scale").toDouble(), 1024.0);

  MixedPrecision restored(torch::kBFloat16, torch::kCPU, std::make_shared<GradScaler>());
  restored.load_state_dict(state);
  EXPECT_EQ(restored.scaler()->get_scale(), 1024.0);
  // A precision without a scaler has no use for a loss scale (16-mixed → bf16-mixed on resume).
  plain.load_state_dict(state);
  EXPECT_TRUE(plain.state_dict().empty());

  MixedPrecision disabled(torch::kBFloat16, torch::kCPU, std::make_shared<GradScaler>(GradScalerOptions{.enabled = false}));
  EXPECT_TRUE(disabled.metrics().empty());
}

}  // namespace
}  // namespace volt::testing

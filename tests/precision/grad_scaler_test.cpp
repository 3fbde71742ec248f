// GradScaler in the spirit of PyTorch's scaling tests: a control model trained without scaling
// that skips chosen iterations, and a scaled model whose gradients get an inf/NaN injected at
// exactly those iterations, must end with equal parameters, and the scale must be
// init × growth^k × backoff^j. Also with accumulation, clipping, two optimizers, a state_dict
// round trip and a cross-rank reducer; plus the API's errors and the CPU kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>

#include "core/error.h"
#include "precision/amp_unscale.h"
#include "precision/grad_scaler.h"

namespace volt::testing {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// A small MLP with identical initial weights for every seed-0 instance.
torch::nn::Sequential make_model() {
  torch::manual_seed(0);
  return torch::nn::Sequential(torch::nn::Linear(8, 8), torch::nn::ReLU(), torch::nn::Linear(8, 4));
}

struct Data {
  std::vector<torch::Tensor> inputs, targets;
};

Data make_data(int64_t batches) {
  torch::manual_seed(1);
  Data data;
  for (int64_t i = 0; i < batches; ++i) {
    data.inputs.push_back(torch::randn({6, 8}));
    data.targets.push_back(torch::randn({6, 4}));
  }
  return data;
}

torch::Tensor flat(const torch::nn::Module& module) {
  std::vector<torch::Tensor> parts;
  for (const auto& p : module.parameters()) parts.push_back(p.detach().flatten());
  return torch::cat(parts);
}

void expect_same(const torch::nn::Module& control, const torch::nn::Module& scaled, const std::string& what) {
  const auto a = flat(control), b = flat(scaled);
  EXPECT_TRUE(torch::allclose(a, b, /*rtol=*/1e-5, /*atol=*/1e-7))
      << what << ": max difference " << (a - b).abs().max().item<double>();
}

// Poisons one gradient element of `module`'s last layer: inf on even iterations, NaN on odd.
void inject_non_finite(torch::nn::Sequential& module, int64_t iteration) {
  auto grad = module->parameters().back().mutable_grad();
  grad.view(-1)[0].fill_(iteration % 2 == 0 ? kInf : std::nan(""));
}

std::shared_ptr<torch::optim::Optimizer> make_optimizer(torch::nn::Sequential& model, bool adam) {
  if (adam) return std::make_shared<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(1e-2));
  return std::make_shared<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
}

// How a run treats each iteration's gradients before stepping.
enum class Variant { Plain, Accumulation, ClipNorm };

// Control: no scaler; the iterations in `skip` take no step. Scaled: `scaler`, with an inf/NaN
// injected into a gradient at the iterations in `skip`.
void run(torch::nn::Sequential& model, torch::optim::Optimizer& optimizer, GradScaler* scaler,
         const Data& data, const std::set<int64_t>& skip, Variant variant) {
  const int64_t micro_batches = variant == Variant::Accumulation ? 2 : 1;
  for (int64_t i = 0; i < static_cast<int64_t>(data.inputs.size()); ++i) {
    optimizer.zero_grad();
    for (int64_t m = 0; m < micro_batches; ++m) {
      // Each micro-batch sees a different half of the batch.
      auto input = data.inputs[i].chunk(micro_batches)[m];
      auto target = data.targets[i].chunk(micro_batches)[m];
      auto loss = torch::mse_loss(model->forward(input), target) / static_cast<double>(micro_batches);
      (scaler ? scaler->scale(loss) : loss).backward();
      // With accumulation the poison goes into the first micro-batch: later ones must not wash it out.
      if (scaler && m == 0 && skip.count(i)) inject_non_finite(model, i);
    }
    if (variant == Variant::ClipNorm) {
      if (scaler) scaler->unscale_(optimizer);
      torch::nn::utils::clip_grad_norm_(model->parameters(), 0.05);
    }
    if (scaler) {
      const bool stepped = scaler->step(optimizer);
      EXPECT_EQ(stepped, skip.count(i) == 0) << "iteration " << i;
      scaler->update();
    } else if (!skip.count(i)) {
      optimizer.step();
    }
  }
}

struct Case {
  Variant variant;
  bool adam;
  const char* name;
};

class ScalingCase : public ::testing::TestWithParam<Case> {};

TEST_P(ScalingCase, ScaledRunEqualsControlThatSkipsTheInjectedIterations) {
  const auto& c = GetParam();
  const std::set<int64_t> skip{2, 5};
  const auto data = make_data(8);
  for (bool enabled : {true, false}) {
    auto control = make_model(), scaled = make_model();
    auto control_optimizer = make_optimizer(control, c.adam), scaled_optimizer = make_optimizer(scaled, c.adam);
    GradScaler scaler({.init_scale = 128.0, .growth_interval = 1, .enabled = enabled});
    run(control, *control_optimizer, nullptr, data, enabled ? skip : std::set<int64_t>{}, c.variant);
    run(scaled, *scaled_optimizer, &scaler, data, enabled ? skip : std::set<int64_t>{}, c.variant);
    expect_same(*control, *scaled, std::string(c.name) + (enabled ? " (enabled)" : " (disabled)"));
    if (enabled) {
      // 6 finite iterations grow the scale (interval 1), 2 back it off.
      EXPECT_EQ(scaler.get_scale(), 128.0 * std::pow(2.0, 6) * std::pow(0.5, 2));
      EXPECT_EQ(scaler.skipped_steps(), 2);
    } else {
      EXPECT_EQ(scaler.get_scale(), 1.0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(GradScaler, ScalingCase,
                         ::testing::Values(Case{Variant::Plain, false, "SGD"}, Case{Variant::Plain, true, "Adam"},
                                           Case{Variant::Accumulation, false, "accumulation"},
                                           Case{Variant::ClipNorm, false, "clip_grad_norm"},
                                           Case{Variant::ClipNorm, true, "clip_grad_norm+Adam"}),
                         [](const auto& info) {
                           std::string name = info.param.name;
                           for (auto& ch : name) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name;
                         });

TEST(GradScaler, ClippingWithoutUnscalingWouldDifferSoTheClippingCaseCanFail) {
  // The clipping case compares against a control that clips true gradients. Clipping the scaled
  // gradients instead (no unscale_ before clip) gives another result; this shows the comparison
  // distinguishes the two.
  const auto data = make_data(4);
  auto control = make_model(), scaled = make_model();
  auto control_optimizer = make_optimizer(control, false), scaled_optimizer = make_optimizer(scaled, false);
  run(control, *control_optimizer, nullptr, data, {}, Variant::ClipNorm);
  GradScaler scaler({.init_scale = 128.0});
  for (size_t i = 0; i < data.inputs.size(); ++i) {
    scaled_optimizer->zero_grad();
    scaler.scale(torch::mse_loss(scaled->forward(data.inputs[i]), data.targets[i])).backward();
    torch::nn::utils::clip_grad_norm_(scaled->parameters(), 0.05);  // on scaled gradients
    scaler.step(*scaled_optimizer);
    scaler.update();
  }
  EXPECT_FALSE(torch::allclose(flat(*control), flat(*scaled), 1e-5, 1e-7));
}

TEST(GradScaler, GrowthIntervalCountsConsecutiveFiniteIterations) {
  // interval 3, inf at 4: finite 0,1,2 → grow; 3 finite (tracker 1); 4 inf → back off, tracker 0;
  // 5,6,7 → grow; 8 finite → tracker 1.
  const auto data = make_data(9);
  auto control = make_model(), scaled = make_model();
  auto control_optimizer = make_optimizer(control, false), scaled_optimizer = make_optimizer(scaled, false);
  GradScaler scaler({.init_scale = 1024.0, .growth_factor = 4.0, .backoff_factor = 0.25, .growth_interval = 3});
  run(control, *control_optimizer, nullptr, data, {4}, Variant::Plain);
  run(scaled, *scaled_optimizer, &scaler, data, {4}, Variant::Plain);
  expect_same(*control, *scaled, "growth interval 3");
  EXPECT_EQ(scaler.get_scale(), 1024.0 * 4.0 * 0.25 * 4.0);
  EXPECT_EQ(scaler.growth_tracker(), 1);
  EXPECT_EQ(scaler.skipped_steps(), 1);
}

TEST(GradScaler, TwoOptimizersSkipIndependentlyAndTheScaleBacksOffOnce) {
  const auto data = make_data(6);
  const int64_t skip_iteration = 3;
  auto control0 = make_model(), control1 = make_model(), scaled0 = make_model(), scaled1 = make_model();
  auto c0 = make_optimizer(control0, false), c1 = make_optimizer(control1, true);
  auto s0 = make_optimizer(scaled0, false), s1 = make_optimizer(scaled1, true);
  GradScaler scaler({.init_scale = 128.0, .growth_interval = 1});
  for (int64_t i = 0; i < 6; ++i) {
    for (auto* o : {c0.get(), c1.get(), s0.get(), s1.get()}) o->zero_grad();
    const auto& x = data.inputs[i];
    const auto& y = data.targets[i];
    (torch::mse_loss(control0->forward(x), y) + torch::mse_loss(control1->forward(x), y)).backward();
    c0->step();
    if (i != skip_iteration) c1->step();
    scaler.scale(torch::mse_loss(scaled0->forward(x), y) + torch::mse_loss(scaled1->forward(x), y)).backward();
    if (i == skip_iteration) inject_non_finite(scaled1, i);
    EXPECT_TRUE(scaler.step(*s0)) << "iteration " << i;
    EXPECT_EQ(scaler.step(*s1), i != skip_iteration) << "iteration " << i;
    scaler.update();
  }
  expect_same(*control0, *scaled0, "optimizer 0 (never skips)");
  expect_same(*control1, *scaled1, "optimizer 1 (skips iteration 3)");
  EXPECT_EQ(scaler.get_scale(), 128.0 * std::pow(2.0, 5) * 0.5);
  EXPECT_EQ(scaler.skipped_steps(), 1);
}

// Note [Skipping a step on the device]: with a device step installed, step() hands the flag over
// instead of reading it and returns true; the decision, the skipped count and the scale end as
// with the host's decision.
TEST(GradScaler, ADeviceStepDecidesTheSkipsAndTheScalerNeverReadsTheFlag) {
  const auto data = make_data(6);
  const int64_t skip_iteration = 2;
  auto host = make_model(), device = make_model();
  auto h = make_optimizer(host, true), d = make_optimizer(device, true);
  GradScaler host_scaler({.init_scale = 256.0, .growth_interval = 2});
  GradScaler device_scaler({.init_scale = 256.0, .growth_interval = 2});
  std::vector<float> flags;
  device_scaler.set_device_step([&](torch::optim::Optimizer& optimizer, const torch::Tensor& found_inf) {
    flags.push_back(found_inf.item<float>());  // the test reads it; the scaler does not
    if (flags.back() == 0.0f) optimizer.step();
  });
  for (int64_t i = 0; i < 6; ++i) {
    h->zero_grad();
    d->zero_grad();
    host_scaler.scale(torch::mse_loss(host->forward(data.inputs[i]), data.targets[i])).backward();
    device_scaler.scale(torch::mse_loss(device->forward(data.inputs[i]), data.targets[i])).backward();
    if (i == skip_iteration) {
      inject_non_finite(host, i);
      inject_non_finite(device, i);
    }
    EXPECT_EQ(host_scaler.step(*h), i != skip_iteration) << "iteration " << i;
    EXPECT_TRUE(device_scaler.step(*d)) << "iteration " << i << ": the device decides, step() returns true";
    host_scaler.update();
    device_scaler.update();
    ASSERT_TRUE(device_scaler.last_found_inf().defined());
    EXPECT_EQ(device_scaler.last_found_inf().item<float>() != 0.0f, i == skip_iteration) << "iteration " << i;
  }
  ASSERT_EQ(flags.size(), 6u);
  EXPECT_EQ(flags[skip_iteration], 1.0f);
  expect_same(*host, *device, "device-decided steps");
  EXPECT_EQ(device_scaler.get_scale(), host_scaler.get_scale());
  EXPECT_EQ(device_scaler.skipped_steps(), 1);
  EXPECT_EQ(host_scaler.skipped_steps(), 1);
}

TEST(GradScaler, StateDictRoundTripContinuesExactlyLikeAnUninterruptedRun) {
  const auto data = make_data(10);
  const std::set<int64_t> skip{1, 7};
  const GradScalerOptions options{.init_scale = 256.0, .growth_interval = 3};

  auto reference = make_model();
  auto reference_optimizer = make_optimizer(reference, false);
  GradScaler uninterrupted(options);
  run(reference, *reference_optimizer, &uninterrupted, data, skip, Variant::Plain);

  auto resumed = make_model();
  auto resumed_optimizer = make_optimizer(resumed, false);
  Data first, second;
  first.inputs.assign(data.inputs.begin(), data.inputs.begin() + 5);
  first.targets.assign(data.targets.begin(), data.targets.begin() + 5);
  second.inputs.assign(data.inputs.begin() + 5, data.inputs.end());
  second.targets.assign(data.targets.begin() + 5, data.targets.end());
  GradScaler before(options);
  run(resumed, *resumed_optimizer, &before, first, {1}, Variant::Plain);
  const StateDict state = before.state_dict();
  // 1 skipped (256 → 128, tracker 0), then 2,3,4 finite → grow to 256, tracker 0.
  EXPECT_EQ(state.at("scale").toDouble(), 256.0);
  EXPECT_EQ(state.at("growth_factor").toDouble(), 2.0);
  EXPECT_EQ(state.at("backoff_factor").toDouble(), 0.5);
  EXPECT_EQ(state.at("growth_interval").toInt(), 3);
  EXPECT_EQ(state.at("_growth_tracker").toInt(), 0);
  EXPECT_EQ(state.at("_skipped_steps").toInt(), 1);

  // A scaler built with other settings takes the saved ones.
  GradScaler after({.init_scale = 2.0, .growth_factor = 8.0, .growth_interval = 100});
  after.load_state_dict(state);
  EXPECT_EQ(after.get_scale(), 256.0);
  EXPECT_EQ(after.options().growth_interval, 3);
  run(resumed, *resumed_optimizer, &after, second, {2}, Variant::Plain);  // iteration 7 overall

  expect_same(*reference, *resumed, "resumed from state_dict");
  EXPECT_EQ(after.get_scale(), uninterrupted.get_scale());
  EXPECT_EQ(after.growth_tracker(), uninterrupted.growth_tracker());
  EXPECT_EQ(after.skipped_steps(), uninterrupted.skipped_steps());
}

TEST(GradScaler, LoadingIntoAScalerThatAlreadyScaledOverwritesItsScale) {
  GradScaler source({.init_scale = 32.0});
  GradScaler target;
  target.scale(torch::ones({}));  // creates the scale tensor
  target.load_state_dict(source.state_dict());
  EXPECT_EQ(target.get_scale(), 32.0);
  EXPECT_EQ(target.scale(torch::ones({})).item<float>(), 32.0f);
}

TEST(GradScaler, AReducerThatReportsInfSkipsAStepWhoseLocalGradientsAreFinite) {
  // Another rank saw an inf at iteration 3: the reducer (standing in for an all-reduce Max)
  // reports it here, so this rank skips too although its own gradients are finite.
  const auto data = make_data(6);
  auto control = make_model(), scaled = make_model();
  auto control_optimizer = make_optimizer(control, false), scaled_optimizer = make_optimizer(scaled, false);
  GradScaler scaler({.init_scale = 64.0, .growth_interval = 1});
  int calls = 0;
  std::vector<float> local_flags;
  scaler.set_found_inf_reducer([&](const torch::Tensor& found_inf) {
    local_flags.push_back(found_inf.item<float>());
    return calls++ == 3 ? torch::ones_like(found_inf) : found_inf;
  });
  run(control, *control_optimizer, nullptr, data, {3}, Variant::Plain);
  for (size_t i = 0; i < data.inputs.size(); ++i) {
    scaled_optimizer->zero_grad();
    scaler.scale(torch::mse_loss(scaled->forward(data.inputs[i]), data.targets[i])).backward();
    EXPECT_EQ(scaler.step(*scaled_optimizer), i != 3) << "iteration " << i;
    scaler.update();
  }
  expect_same(*control, *scaled, "reducer-injected skip");
  EXPECT_EQ(calls, 6) << "one reduction per optimizer per iteration";
  EXPECT_EQ(local_flags, std::vector<float>(6, 0.0f)) << "every local gradient was finite";
  EXPECT_EQ(scaler.get_scale(), 64.0 * std::pow(2.0, 5) * 0.5);
}

TEST(GradScaler, ScaleMultipliesByInitScaleAndDefaultsArePyTorchs) {
  GradScaler scaler;
  EXPECT_EQ(scaler.options().init_scale, 65536.0);
  EXPECT_EQ(scaler.options().growth_factor, 2.0);
  EXPECT_EQ(scaler.options().backoff_factor, 0.5);
  EXPECT_EQ(scaler.options().growth_interval, 2000);
  EXPECT_TRUE(scaler.is_enabled());
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  const auto scaled = scaler.scale(torch::tensor(1.5));
  EXPECT_EQ(scaled.item<float>(), 1.5f * 65536.0f);
  const auto many = scaler.scale(std::vector<torch::Tensor>{torch::tensor(1.0), torch::full({2}, 3.0)});
  EXPECT_EQ(many[0].item<float>(), 65536.0f);
  EXPECT_TRUE(torch::equal(many[1], torch::full({2}, 3.0 * 65536.0)));
}

TEST(GradScaler, DisabledScalerPassesEverythingThrough) {
  GradScaler scaler({.enabled = false});
  auto model = make_model();
  auto optimizer = make_optimizer(model, false);
  const auto before = flat(*model);
  const auto loss = torch::mse_loss(model->forward(torch::ones({2, 8})), torch::zeros({2, 4}));
  EXPECT_TRUE(scaler.scale(loss).is_same(loss));
  scaler.scale(loss).backward();
  inject_non_finite(model, 0);
  scaler.unscale_(*optimizer);
  EXPECT_TRUE(scaler.step(*optimizer)) << "a disabled scaler never skips";
  scaler.update();
  EXPECT_FALSE(torch::equal(before, flat(*model)));
  EXPECT_EQ(scaler.get_scale(), 1.0);
  EXPECT_TRUE(scaler.state_dict().empty());
  scaler.load_state_dict(StateDict{});  // ignored, as in PyTorch
}

// Runs one scaled backward of `model`, so that the optimizer has gradients.
void backward_once(GradScaler& scaler, torch::nn::Sequential& model) {
  scaler.scale(torch::mse_loss(model->forward(torch::ones({2, 8})), torch::zeros({2, 4}))).backward();
}

template <typename Body>
std::string error_of(Body&& body) {
  try {
    body();
  } catch (const ConfigurationError& e) {
    return e.what();
  }
  return "<no ConfigurationError>";
}

TEST(GradScaler, CallsOutOfOrderAreErrors) {
  auto model = make_model();
  auto optimizer = make_optimizer(model, false);
  GradScaler scaler;
  EXPECT_NE(error_of([&] { scaler.unscale_(*optimizer); }).find("call scale(loss)"), std::string::npos);
  backward_once(scaler, model);
  scaler.unscale_(*optimizer);
  EXPECT_NE(error_of([&] { scaler.unscale_(*optimizer); }).find("already called"), std::string::npos);
  scaler.step(*optimizer);
  EXPECT_NE(error_of([&] { scaler.step(*optimizer); }).find("already called"), std::string::npos);
  EXPECT_NE(error_of([&] { scaler.unscale_(*optimizer); }).find("after step()"), std::string::npos);
  scaler.update();
  EXPECT_NE(error_of([&] { scaler.update(); }).find("no optimizer was unscaled"), std::string::npos);
  // After update() the next iteration may unscale again.
  optimizer->zero_grad();
  backward_once(scaler, model);
  scaler.unscale_(*optimizer);
  scaler.step(*optimizer);
  scaler.update();
}

TEST(GradScaler, BadOptionsAndFloat16GradientsAreErrors) {
  EXPECT_NE(error_of([] { GradScaler({.growth_factor = 1.0}); }).find("growth_factor > 1.0, got 1"),
            std::string::npos);
  EXPECT_NE(error_of([] { GradScaler({.backoff_factor = 1.5}); }).find("backoff_factor"), std::string::npos);
  EXPECT_NE(error_of([] { GradScaler({.growth_interval = 0}); }).find("growth_interval >= 1"), std::string::npos);
  EXPECT_NE(error_of([] { GradScaler({.init_scale = -1}); }).find("init_scale"), std::string::npos);

  auto weight = torch::ones({3}, torch::kHalf).requires_grad_();
  weight.mutable_grad() = torch::ones({3}, torch::kHalf);
  torch::optim::SGD optimizer({weight}, 0.1);
  GradScaler scaler;
  scaler.scale(torch::ones({}));
  EXPECT_NE(error_of([&] { scaler.unscale_(optimizer); }).find("float16"), std::string::npos);
}

TEST(GradScaler, MalformedStateIsACheckpointError) {
  GradScaler scaler;
  EXPECT_THROW(scaler.load_state_dict(StateDict{}), CheckpointError);
  auto state = GradScaler().state_dict();
  state.set("_growth_tracker", int64_t{5000});
  EXPECT_THROW(scaler.load_state_dict(state), CheckpointError) << "tracker beyond growth_interval";
  state = GradScaler().state_dict();
  state.set("scale", std::string("big"));
  EXPECT_THROW(scaler.load_state_dict(state), CheckpointError);
  state = GradScaler().state_dict();
  state.set("backoff_factor", 2.0);
  EXPECT_THROW(scaler.load_state_dict(state), CheckpointError);
  state = GradScaler().state_dict();
  state.erase("growth_interval");
  EXPECT_THROW(scaler.load_state_dict(state), CheckpointError);
  EXPECT_EQ(scaler.get_scale(), 65536.0) << "a failed load leaves the scaler as it was";
}

TEST(GradScaler, UpdateWithAnExplicitScale) {
  auto model = make_model();
  auto optimizer = make_optimizer(model, false);
  GradScaler scaler;
  backward_once(scaler, model);
  scaler.step(*optimizer);
  scaler.update(3.0);
  EXPECT_EQ(scaler.get_scale(), 3.0);
  EXPECT_EQ(scaler.scale(torch::tensor(2.0)).item<float>(), 6.0f);
}

TEST(GradScaler, SparseGradientsAreUnscaledAndChecked) {
  torch::manual_seed(0);
  torch::nn::Embedding embedding(torch::nn::EmbeddingOptions(10, 3).sparse(true));
  torch::optim::SGD optimizer(embedding->parameters(), 0.1);
  GradScaler scaler({.init_scale = 8.0});
  const auto ids = torch::tensor({1, 4, 4}, torch::kLong);
  scaler.scale(embedding->forward(ids).sum()).backward();
  ASSERT_TRUE(embedding->weight.grad().is_sparse());
  scaler.unscale_(optimizer);
  const auto dense = embedding->weight.grad().to_dense();
  EXPECT_TRUE(torch::equal(dense[4], torch::full({3}, 2.0))) << "two lookups of row 4, unscaled";
  EXPECT_TRUE(torch::equal(dense[1], torch::ones({3})));
  EXPECT_TRUE(scaler.step(optimizer));
  scaler.update();

  optimizer.zero_grad();
  scaler.scale(embedding->forward(ids).sum() * kInf).backward();
  EXPECT_FALSE(scaler.step(optimizer)) << "an inf in the sparse values skips the step";
}

TEST(AmpKernels, CpuUnscaleMultipliesAndFlagsInfAndNaN) {
  const auto inv_scale = torch::full({1}, 0.25f);
  auto found_inf = torch::zeros({1});
  std::vector<torch::Tensor> grads{torch::full({2, 2}, 8.0), torch::tensor(4.0), torch::empty({0})};
  non_finite_check_and_unscale_(grads, found_inf, inv_scale);
  EXPECT_TRUE(torch::equal(grads[0], torch::full({2, 2}, 2.0)));
  EXPECT_EQ(grads[1].dim(), 0) << "a 0-dim gradient keeps its shape";
  EXPECT_EQ(grads[1].item<float>(), 1.0f);
  EXPECT_EQ(found_inf.item<float>(), 0.0f);

  for (double poison : {kInf, -kInf, std::nan("")}) {
    auto flag = torch::zeros({1});
    std::vector<torch::Tensor> bad{torch::ones({3}), torch::tensor({1.0, poison})};
    non_finite_check_and_unscale_(bad, flag, inv_scale);
    EXPECT_EQ(flag.item<float>(), 1.0f) << poison;
    EXPECT_EQ(bad[0][0].item<float>(), 0.25f) << "finite gradients are unscaled even when another is not";
    // Once raised, a later call over finite gradients leaves the flag up.
    std::vector<torch::Tensor> good{torch::ones({3})};
    non_finite_check_and_unscale_(good, flag, inv_scale);
    EXPECT_EQ(flag.item<float>(), 1.0f);
  }
}

TEST(AmpKernels, CpuUpdateScaleFollowsPyTorchsRule) {
  auto scale = torch::full({1}, 16.0f);
  auto tracker = torch::zeros({1}, torch::kInt);
  const auto finite = torch::zeros({1}), inf = torch::ones({1});
  update_scale_(scale, tracker, finite, 2.0, 0.5, 2);
  EXPECT_EQ(scale.item<float>(), 16.0f);
  EXPECT_EQ(tracker.item<int32_t>(), 1);
  update_scale_(scale, tracker, finite, 2.0, 0.5, 2);
  EXPECT_EQ(scale.item<float>(), 32.0f);
  EXPECT_EQ(tracker.item<int32_t>(), 0);
  update_scale_(scale, tracker, finite, 2.0, 0.5, 2);
  update_scale_(scale, tracker, inf, 2.0, 0.5, 2);
  EXPECT_EQ(scale.item<float>(), 16.0f);
  EXPECT_EQ(tracker.item<int32_t>(), 0) << "a backoff restarts the count";

  // Growth that would overflow float32 keeps the scale.
  auto huge = torch::full({1}, std::numeric_limits<float>::max() / 1.5f);
  update_scale_(huge, tracker, finite, 2.0, 0.5, 1);
  EXPECT_TRUE(std::isfinite(huge.item<float>()));
  EXPECT_EQ(huge.item<float>(), std::numeric_limits<float>::max() / 1.5f);
  EXPECT_EQ(tracker.item<int32_t>(), 0);
}

}  // namespace
}  // namespace volt::testing

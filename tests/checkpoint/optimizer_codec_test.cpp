// A user's own optimizer class gets PyTorch's state_dict layout by registering an
// OptimizerStateCodec: its state is written under PyTorch's names (not as LibTorch's opaque
// archive) and a restored optimizer continues bitwise like the original.
#include <gtest/gtest.h>

#include "checkpoint/checkpoint_io.h"
#include "checkpoint/optimizer_state.h"
#include "checkpoint/optimizer_state_codec.h"
#include "core/compat.h"
#include "core/error.h"
#include "tests/support/test_support.h"

namespace volt::testing {
namespace {

// signSGD with momentum (Bernstein et al., 2018): m ← β·m + (1 − β)·g; θ ← θ − lr·sign(m).
struct SignumOptions : public torch::optim::OptimizerCloneableOptions<SignumOptions> {
  SignumOptions(double lr = 0.01) : lr_(lr) {}  // NOLINT: implicit like LibTorch's own options
  TORCH_ARG(double, lr);
  TORCH_ARG(double, beta) = 0.9;
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
};

struct SignumParamState : public torch::optim::OptimizerCloneableParamState<SignumParamState> {
  TORCH_ARG(int64_t, step) = 0;
  TORCH_ARG(torch::Tensor, momentum);
};

class Signum : public torch::optim::Optimizer {
 public:
  Signum(std::vector<torch::Tensor> params, SignumOptions defaults)
      : Optimizer({torch::optim::OptimizerParamGroup(std::move(params))}, std::make_unique<SignumOptions>(defaults)) {}

  torch::Tensor step(LossClosure closure = nullptr) override {
    torch::Tensor loss;
    if (closure) loss = closure();
    torch::NoGradGuard no_grad;
    for (auto& group : param_groups_) {
      const auto& options = static_cast<const SignumOptions&>(group.options());
      for (auto& p : group.params()) {
        if (!p.grad().defined()) continue;
        auto& slot = state_[compat::optimizer_state_key(p)];
        if (!slot) {
          auto fresh = std::make_unique<SignumParamState>();
          fresh->momentum(torch::zeros_like(p));
          slot = std::move(fresh);
        }
        auto& state = static_cast<SignumParamState&>(*slot);
        state.step(state.step() + 1);
        state.momentum().mul_(options.beta()).add_(p.grad(), 1 - options.beta());
        p.add_(state.momentum().sign(), -options.lr());
      }
    }
    return loss;
  }
  // LibTorch's archive of this class would hold nothing: without a codec its state is lost.
  void save(torch::serialize::OutputArchive&) const override {}
  void load(torch::serialize::InputArchive&) override {}
};

// A subclass without a codec of its own is served by its base class's.
class NamedSignum : public Signum {
 public:
  using Signum::Signum;
};

void register_signum_codec() {
  static const bool registered = [] {
    optimizer_state_codecs().add(optimizer_state_codec<Signum, SignumOptions, SignumParamState>(
        "Signum",
        [](const SignumOptions& o, StateDict& group) {
          group.set("lr", o.lr());
          group.set("beta", o.beta());
        },
        [](SignumOptions& o, const StateDict& group) { o.lr(group.get_double("lr")).beta(group.get_double("beta")); },
        [](const SignumParamState& p, StateDict& state) {
          put_step(state, p.step());
          put_state_tensor(state, "momentum", p.momentum());
        },
        [](SignumParamState& p, const StateDict& state, const torch::Tensor& parameter, const ParameterContext& c) {
          p.step(take_step(state, c));
          p.momentum(take_state_tensor(state, "momentum", parameter, c));
        }));
    return true;
  }();
  (void)registered;
}

std::vector<torch::Tensor> signum_parameters() {
  torch::manual_seed(5);
  return {torch::randn({3, 2}).requires_grad_(), torch::randn({3}).requires_grad_()};
}

void signum_step(torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& params, int64_t i) {
  optimizer.zero_grad();
  const auto x = torch::arange(2, torch::kFloat).add(static_cast<double>(i)).cos();
  (params[0].matmul(x) + params[1]).pow(2).sum().backward();
  optimizer.step();
}

TEST(OptimizerStateCodec, AUserCodecWritesPyTorchsLayout) {
  register_signum_codec();
  auto params = signum_parameters();
  Signum optimizer(params, SignumOptions(0.05).beta(0.8));
  for (int64_t i = 0; i < 2; ++i) signum_step(optimizer, params, i);

  const StateDict state = optimizer_state_dict(optimizer);
  EXPECT_EQ(state.get_string("volt_optimizer"), "Signum");
  EXPECT_FALSE(state.contains("libtorch_archive"));
  const auto groups = state.at("param_groups").toListRef();
  ASSERT_EQ(groups.size(), 1u);
  const auto group = StateDict::from_ivalue(groups[0], "group");
  EXPECT_EQ(group.get_double("lr"), 0.05);
  EXPECT_EQ(group.get_double("beta"), 0.8);
  EXPECT_EQ(group.get_ints("params"), (std::vector<int64_t>{0, 1}));
  const auto per_parameter = state.at("state").toGenericDict();
  ASSERT_EQ(per_parameter.size(), 2u);
  for (int64_t index = 0; index < 2; ++index) {
    const auto saved = StateDict::from_ivalue(per_parameter.at(c10::IValue(index)), "state");
    EXPECT_EQ(saved.get_tensor("step").item<double>(), 2.0);
    const auto& live = static_cast<const SignumParamState&>(
        *optimizer.state().at(compat::optimizer_state_key(params[static_cast<size_t>(index)])));
    EXPECT_TRUE(torch::equal(saved.get_tensor("momentum"), live.momentum())) << "parameter " << index;
  }
}

TEST(OptimizerStateCodec, AUserOptimizersStateRoundTripsAndContinuesBitwise) {
  register_signum_codec();
  auto params = signum_parameters();
  Signum original(params, SignumOptions(0.05).beta(0.8));
  for (int64_t i = 0; i < 3; ++i) signum_step(original, params, i);

  TemporaryDirectory dir;
  CheckpointIO io;
  StateDict checkpoint;
  checkpoint.set("optimizer", optimizer_state_dict(original));
  io.save(checkpoint, dir.file("signum.ckpt"));
  const StateDict loaded = io.load(dir.file("signum.ckpt")).child("optimizer");

  std::vector<torch::Tensor> copies;
  for (const auto& p : params) copies.push_back(p.detach().clone().requires_grad_());
  Signum restored(copies, SignumOptions(1.0).beta(0.1));  // the checkpoint's options must replace these
  load_optimizer_state_dict(restored, loaded, "optimizer 0");
  const auto& options = static_cast<const SignumOptions&>(restored.param_groups()[0].options());
  EXPECT_EQ(options.lr(), 0.05);
  EXPECT_EQ(options.beta(), 0.8);
  for (int64_t i = 3; i < 6; ++i) {
    signum_step(original, params, i);
    signum_step(restored, copies, i);
    for (size_t k = 0; k < params.size(); ++k) {
      EXPECT_TRUE(torch::equal(params[k], copies[k])) << "parameter " << k << " after step " << i;
    }
  }
}

TEST(OptimizerStateCodec, SubclassesUseTheBaseCodecAndAClassTakesOneCodec) {
  register_signum_codec();
  auto params = signum_parameters();
  NamedSignum optimizer(params, SignumOptions(0.05));
  signum_step(optimizer, params, 0);
  EXPECT_EQ(optimizer_state_dict(optimizer).get_string("volt_optimizer"), "Signum");
  const auto& found = *optimizer_state_codecs().find(optimizer);
  EXPECT_EQ(found.name, "Signum");
  torch::optim::Adam adam(params);
  EXPECT_EQ(optimizer_state_codecs().find(adam)->name, "Adam") << "the built-ins stay";
  EXPECT_THROW(optimizer_state_codecs().add(optimizer_state_codec<Signum, SignumOptions, SignumParamState>(
                   "Signum2", [](const SignumOptions&, StateDict&) {}, [](SignumOptions&, const StateDict&) {},
                   [](const SignumParamState&, StateDict&) {},
                   [](SignumParamState&, const StateDict&, const torch::Tensor&, const ParameterContext&) {})),
               ConfigurationError);
}

}  // namespace
}  // namespace volt::testing

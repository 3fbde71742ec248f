// volt::FusedAdamW against torch::optim::AdamW on the CPU (Note [Fused AdamW]): the same
// parameters and state after every step, with amsgrad and without, a late-joining parameter, a
// parameter without gradients, and checkpoints that move between the two optimizers. On a
// LibTorch without the fused kernel (1.13) the step is AdamW's own and the results are equal
// bit for bit; with it (2.4 and later) they agree to float rounding.
#include <gtest/gtest.h>

#include "checkpoint/optimizer_state.h"
#include "core/compat.h"
#include "tests/support/fused_adamw_problem.h"
#include "run/optim/fused_adamw.h"

namespace volt::testing {
namespace {

void expect_close(const torch::Tensor& fused, const torch::Tensor& reference, const std::string& what) {
  if (FusedAdamW::fused_available()) {
    EXPECT_TRUE(torch::allclose(fused, reference, /*rtol=*/1e-5, /*atol=*/1e-6))
        << what << ": largest difference " << (fused - reference).abs().max().item<double>();
  } else {
    EXPECT_TRUE(torch::equal(fused, reference)) << what << ": AdamW's own step must give the same bits";
  }
}

const torch::optim::AdamWParamState* state_of(const torch::optim::Optimizer& optimizer, const torch::Tensor& p) {
  const auto found = optimizer.state().find(compat::optimizer_state_key(p));
  return found == optimizer.state().end() ? nullptr
                                          : static_cast<const torch::optim::AdamWParamState*>(found->second.get());
}

TEST(FusedAdamW, KnowsWhetherThisLibTorchHasTheKernel) {
  EXPECT_EQ(FusedAdamW::fused_available(),
            TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4));
}

TEST(FusedAdamW, EqualsAdamWAfterEveryStep) {
  for (const bool amsgrad : {false, true}) {
    auto fused = make_adamw_problem(make_fused, torch::kCPU, amsgrad);
    auto reference = make_adamw_problem(make_adamw, torch::kCPU, amsgrad);
    for (int64_t step = 0; step < 12; ++step) {
      adamw_problem_step(fused, step);
      adamw_problem_step(reference, step);
      for (size_t i = 0; i < fused.params.size(); ++i) {
        const std::string what =
            "amsgrad " + std::to_string(amsgrad) + ", step " + std::to_string(step) + ", parameter " + std::to_string(i);
        expect_close(fused.params[i], reference.params[i], what);
        const auto* s = state_of(*fused.optimizer, fused.params[i]);
        const auto* r = state_of(*reference.optimizer, reference.params[i]);
        ASSERT_EQ(s == nullptr, r == nullptr) << what << ": state created on one side only";
        if (!s) continue;
        EXPECT_EQ(s->step(), r->step()) << what;
        expect_close(s->exp_avg(), r->exp_avg(), what + ", exp_avg");
        expect_close(s->exp_avg_sq(), r->exp_avg_sq(), what + ", exp_avg_sq");
        if (amsgrad) expect_close(s->max_exp_avg_sq(), r->max_exp_avg_sq(), what + ", max_exp_avg_sq");
      }
    }
    EXPECT_EQ(state_of(*fused.optimizer, fused.params[3])->step(), 8) << "the late joiner counts its own steps";
    EXPECT_EQ(state_of(*fused.optimizer, fused.params[4]), nullptr) << "no gradient, no state";
  }
}

TEST(FusedAdamW, CheckpointsMoveBetweenItAndAdamW) {
  // Train with FusedAdamW, save its state as a checkpoint holds it, resume in torch::optim::AdamW
  // (and the other way round): the resumed run continues as the uninterrupted one.
  for (const bool fused_first : {true, false}) {
    auto first = make_adamw_problem(fused_first ? make_fused : make_adamw, torch::kCPU, false);
    for (int64_t step = 0; step < 6; ++step) adamw_problem_step(first, step);
    const StateDict saved = optimizer_state_dict(*first.optimizer);
    EXPECT_EQ(saved.get_string("volt_optimizer"), "AdamW") << "the AdamW codec serves FusedAdamW";

    auto resumed = make_adamw_problem(fused_first ? make_adamw : make_fused, torch::kCPU, false);
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < first.params.size(); ++i) resumed.params[i].copy_(first.params[i]);
    load_optimizer_state_dict(*resumed.optimizer, saved, "optimizer 0");
    for (int64_t step = 6; step < 10; ++step) {
      at::AutoGradMode grad(true);
      adamw_problem_step(first, step);
      adamw_problem_step(resumed, step);
      for (size_t i = 0; i < first.params.size(); ++i) {
        expect_close(resumed.params[i], first.params[i],
                     std::string(fused_first ? "FusedAdamW -> AdamW" : "AdamW -> FusedAdamW") + ", step " +
                         std::to_string(step) + ", parameter " + std::to_string(i));
      }
    }
  }
}

}  // namespace
}  // namespace volt::testing

#include "trainer/optim/fused_adamw.h"

#include <map>
#include <tuple>
#include <vector>

#include "core/compat.h"
#include "core/error.h"

// ATen's _fused_adamw_ has a CUDA kernel since 2.0 and a CPU one since 2.4.
#define VOLT_FUSED_ADAMW (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4))

namespace volt {

bool FusedAdamW::fused_available() { return VOLT_FUSED_ADAMW; }

#if VOLT_FUSED_ADAMW
namespace {

// The tensors of one _fused_adamw_ call: parameters on one device, of one dtype, at one step.
struct FusedGroup {
  std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs;
};

}  // namespace

torch::Tensor FusedAdamW::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups()) {
    auto& options = static_cast<torch::optim::AdamWOptions&>(group.options());
    // Keyed by device, dtype and step count: a parameter that joined late (its first gradient
    // came later) is at another step and gets its own call.
    std::map<std::tuple<int, int, int, int64_t>, FusedGroup> calls;  // device type, index, dtype, step
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      check<NotSupportedError>(!p.grad().is_sparse(), "FusedAdamW: parameter gradients are sparse; AdamW does not support "
                                          "sparse gradients (use a dense embedding, or SparseAdam in Python)");
      auto& slot = state()[compat::optimizer_state_key(p)];
      if (!slot) {
        auto fresh = std::make_unique<torch::optim::AdamWParamState>();
        fresh->step(0);
        fresh->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        if (options.amsgrad()) fresh->max_exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        slot = std::move(fresh);
      }
      auto& s = static_cast<torch::optim::AdamWParamState&>(*slot);
      if (options.amsgrad() && !s.max_exp_avg_sq().defined()) {
        s.max_exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));  // amsgrad switched on later
      }
      s.step(s.step() + 1);
      auto& call = calls[{static_cast<int>(p.device().type()), p.device().index(), static_cast<int>(p.scalar_type()),
                          s.step()}];
      call.params.push_back(p);
      call.grads.push_back(p.grad());
      call.exp_avgs.push_back(s.exp_avg());
      call.exp_avg_sqs.push_back(s.exp_avg_sq());
      if (options.amsgrad()) call.max_exp_avg_sqs.push_back(s.max_exp_avg_sq());
    }
    const auto [beta1, beta2] = options.betas();
    for (auto& [key, call] : calls) {
      // The kernel reads one step tensor per parameter; they share one (read-only) tensor.
      const auto step = torch::full({}, static_cast<double>(std::get<3>(key)),
                                    torch::TensorOptions().dtype(torch::kFloat).device(call.params.front().device()));
      const std::vector<torch::Tensor> steps(call.params.size(), step);
      at::_fused_adamw_(call.params, call.grads, call.exp_avgs, call.exp_avg_sqs, call.max_exp_avg_sqs, steps,
                        options.lr(), beta1, beta2, options.weight_decay(), options.eps(), options.amsgrad(),
                        /*maximize=*/false);
    }
  }
  return loss;
}
#else
torch::Tensor FusedAdamW::step(LossClosure closure) { return torch::optim::AdamW::step(std::move(closure)); }
#endif

}  // namespace volt

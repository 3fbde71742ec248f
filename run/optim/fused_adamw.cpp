#include "run/optim/fused_adamw.h"

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "core/compat.h"
#include "core/error.h"
#include "run/graph/captured_graph.h"

// ATen's _fused_adamw_ has a CUDA kernel since 2.0 and a CPU one since 2.4.
#define VOLT_FUSED_ADAMW (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4))

namespace volt {

bool FusedAdamW::fused_available() { return VOLT_FUSED_ADAMW; }

#if VOLT_FUSED_ADAMW
namespace {

// The tensors of one _fused_adamw_ call: parameters on one device, of one dtype (and, outside
// capturable mode, at one step).
struct FusedGroup {
  std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps;
};

// The parameter's AdamW state, created (zero moments, step 0) on its first gradient.
torch::optim::AdamWParamState& adamw_state(torch::optim::Optimizer& optimizer, const torch::Tensor& p,
                                           const torch::optim::AdamWOptions& options) {
  check<NotSupportedError>(!p.grad().is_sparse(), "FusedAdamW: parameter gradients are sparse; AdamW does not support "
                                                  "sparse gradients (use a dense embedding, or SparseAdam in Python)");
  auto& slot = optimizer.state()[compat::optimizer_state_key(p)];
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
  return s;
}

void add_to_call(FusedGroup& call, const torch::Tensor& p, const torch::optim::AdamWParamState& s, bool amsgrad) {
  call.params.push_back(p);
  call.grads.push_back(p.grad());
  call.exp_avgs.push_back(s.exp_avg());
  call.exp_avg_sqs.push_back(s.exp_avg_sq());
  if (amsgrad) call.max_exp_avg_sqs.push_back(s.max_exp_avg_sq());
}

}  // namespace

torch::Tensor FusedAdamW::step(LossClosure closure) {
  torch::Tensor loss;
  if (closure) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  if (capturable_) {
    capturable_step({});
  } else {
    fused_step();
  }
  return loss;
}

void FusedAdamW::fused_step() {
  torch::NoGradGuard no_grad;
  for (auto& group : param_groups()) {
    auto& options = static_cast<torch::optim::AdamWOptions&>(group.options());
    // Keyed by device, dtype and step count: a parameter that joined late (its first gradient
    // came later) is at another step and gets its own call.
    std::map<std::tuple<int, int, int, int64_t>, FusedGroup> calls;  // device type, index, dtype, step
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto& s = adamw_state(*this, p, options);
      s.step(s.step() + 1);
      add_to_call(calls[{static_cast<int>(p.device().type()), p.device().index(), static_cast<int>(p.scalar_type()),
                         s.step()}],
                  p, s, options.amsgrad());
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
}

torch::Tensor& FusedAdamW::device_step(const torch::Tensor& param, const torch::optim::AdamWParamState& state) {
  auto& entry = device_steps_[param.unsafeGetTensorImpl()];
  if (entry.state != &state || !entry.count.defined()) {
    // New, or its host state was replaced (a checkpoint load): the host count is the truth.
    // Made outside a capture only: a capture would record the fill and replay the old count.
    check<StateError>(!capturing_on(param.device()),
                      "FusedAdamW: a parameter's step count was created during a capture; run eager steps first");
    const auto on = torch::TensorOptions().dtype(torch::kFloat).device(param.device());
    if (entry.count.defined() && entry.count.device() == param.device()) {
      entry.count.fill_(static_cast<double>(state.step()));  // keeps the address a graph may read
    } else {
      entry.count = torch::full({}, static_cast<double>(state.step()), on);
    }
    entry.state = &state;
  }
  return entry.count;
}

void FusedAdamW::capturable_step(const torch::Tensor& found_inf) {
  torch::NoGradGuard no_grad;
  auto& groups = param_groups();
  device_lrs_.resize(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    auto& options = static_cast<torch::optim::AdamWOptions&>(groups[g].options());
    std::map<std::tuple<int, int, int>, FusedGroup> calls;  // device type, index, dtype
    for (auto& p : groups[g].params()) {
      if (!p.grad().defined()) continue;
      auto& s = adamw_state(*this, p, options);
      auto& call = calls[{static_cast<int>(p.device().type()), p.device().index(), static_cast<int>(p.scalar_type())}];
      add_to_call(call, p, s, options.amsgrad());
      call.steps.push_back(device_step(p, s));
    }
    if (calls.empty()) continue;
    const auto [beta1, beta2] = options.betas();
    for (auto& [key, call] : calls) {
      const auto device = call.params.front().device();
      auto& lr = device_lrs_[g];
      if (!lr.defined() || lr.device() != device) {
        check<StateError>(!capturing_on(device),
                          "FusedAdamW: a group's learning rate was created during a capture; run eager steps first");
        lr = torch::empty({}, torch::TensorOptions().dtype(torch::kFloat).device(device));
      }
      // Outside a capture the options are the truth; during one the replays read what
      // refresh_learning_rates() wrote.
      if (!capturing_on(device)) lr.fill_(options.lr());
      std::optional<torch::Tensor> skip;
      if (found_inf.defined()) skip = found_inf.to(device).reshape({1}).gt(0).to(torch::kFloat);  // 0 or 1 exactly
      at::_foreach_add_(call.steps, 1.0);
      at::_fused_adamw_(call.params, call.grads, call.exp_avgs, call.exp_avg_sqs, call.max_exp_avg_sqs, call.steps, lr,
                        beta1, beta2, options.weight_decay(), options.eps(), options.amsgrad(), /*maximize=*/false,
                        /*grad_scale=*/std::nullopt, skip);
      // A skipped step does not count (PyTorch's fused path with found_inf does the same).
      if (skip) at::_foreach_sub_(call.steps, std::vector<torch::Tensor>(call.steps.size(), skip->reshape({})));
    }
  }
}

void FusedAdamW::set_capturable(bool capturable) {
  check<NotSupportedError>(!capturable || fused_available(),
                           "FusedAdamW: a capturable step needs ATen's fused AdamW kernel (LibTorch 2.4 or later); "
                           "this LibTorch has none");
  if (capturable_ && !capturable) sync_host_steps();
  capturable_ = capturable;
}

void FusedAdamW::step_unless(const torch::Tensor& found_inf) {
  check<StateError>(capturable_, "FusedAdamW::step_unless: only in capturable mode (set_capturable(true))");
  check<ConfigurationError>(found_inf.defined() && found_inf.numel() == 1,
                            "FusedAdamW::step_unless: expected a one-element found_inf tensor");
  capturable_step(found_inf);
}

void FusedAdamW::refresh_learning_rates() {
  auto& groups = param_groups();
  for (size_t g = 0; g < std::min(groups.size(), device_lrs_.size()); ++g) {
    if (device_lrs_[g].defined()) {
      device_lrs_[g].fill_(static_cast<const torch::optim::AdamWOptions&>(groups[g].options()).lr());
    }
  }
}

void FusedAdamW::sync_host_steps() {
  // The counts still tied to the host states they were made from (a replaced state is the truth
  // already), read back in one copy per device rather than one read per parameter.
  std::map<std::string, std::vector<std::pair<torch::optim::AdamWParamState*, torch::Tensor>>> by_device;
  for (auto& group : param_groups()) {
    for (auto& p : group.params()) {
      const auto it = device_steps_.find(p.unsafeGetTensorImpl());
      if (it == device_steps_.end()) continue;
      auto& slot = state()[compat::optimizer_state_key(p)];
      if (!slot || slot.get() != it->second.state) continue;
      by_device[p.device().str()].emplace_back(static_cast<torch::optim::AdamWParamState*>(slot.get()),
                                               it->second.count);
    }
  }
  for (auto& [device, entries] : by_device) {
    std::vector<torch::Tensor> counts;
    for (const auto& entry : entries) counts.push_back(entry.second);
    const auto host = torch::stack(counts).to(torch::kCPU);
    const auto* values = host.data_ptr<float>();
    for (size_t i = 0; i < entries.size(); ++i) entries[i].first->step(static_cast<int64_t>(values[i]));
  }
}
#else
torch::Tensor FusedAdamW::step(LossClosure closure) { return torch::optim::AdamW::step(std::move(closure)); }

void FusedAdamW::set_capturable(bool capturable) {
  check<NotSupportedError>(!capturable, "FusedAdamW: a capturable step needs ATen's fused AdamW kernel (LibTorch 2.4 "
                                        "or later); this LibTorch has none");
}

void FusedAdamW::step_unless(const torch::Tensor&) {
  throw StateError("FusedAdamW::step_unless: only in capturable mode, which this LibTorch cannot run");
}

void FusedAdamW::refresh_learning_rates() {}

void FusedAdamW::sync_host_steps() {}
#endif

void prepare_optimizer_state_for_save(torch::optim::Optimizer& optimizer) {
  if (auto* fused = dynamic_cast<FusedAdamW*>(&optimizer); fused != nullptr && fused->capturable()) {
    fused->sync_host_steps();
  }
}

}  // namespace volt

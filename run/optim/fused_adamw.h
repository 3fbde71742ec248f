#pragma once
// volt::FusedAdamW: LibTorch's AdamW with one fused kernel per step instead of about ten kernels
// per parameter (docs/training_loop.md#fused-adamw).
//
// Note [Fused AdamW] torch::optim::AdamW steps parameter by parameter: scale by the weight decay,
// two moving averages, two bias corrections, a square root, a division, each its own kernel. On a
// GPU a model with a hundred parameter tensors pays a thousand launches per step; PyTorch's
// torch.optim.AdamW runs its multi-tensor (foreach) or fused path there by default, so a LibTorch
// program loses to the same model in Python. FusedAdamW keeps AdamW's options, state and
// checkpoint layout (it is an AdamW: the "AdamW" state codec serves it, and a checkpoint moves
// between the two) and replaces step(): the parameters with a gradient are grouped by device,
// dtype and step count, and each group is one call of ATen's _fused_adamw_, the kernel behind
// torch.optim.AdamW(fused=True). The step count each group reads is a one-element float tensor
// on its device, as PyTorch's fused path keeps it. The arithmetic is AdamW's, evaluated in
// float (the parameters' opmath), so results equal torch::optim::AdamW's to rounding.
// LibTorch before 2.4 has no CPU kernel for it (and 1.13 none at all): there step() is AdamW's.
//
// Note [A step a graph can replay]: a captured step (--cuda-graph) replays the kernels step()
// issued at capture, with the values they were given then. So in capturable mode the numbers that
// change from step to step live on the device: each parameter's step count is a float tensor the
// step increments there (PyTorch's capturable=True), and each group's learning rate is a device
// tensor that refresh_learning_rates() sets from the group's options (an LR scheduler changes the
// options; the replay reads the tensor). step_unless(found_inf) skips the update on the device
// when found_inf is nonzero (the GradScaler's decision, never read on the host), undoing the
// step count's increment. The host's AdamWParamState::step() then lags behind the device's count;
// sync_host_steps() reads the device counts back, and a checkpoint save calls it
// (prepare_optimizer_state_for_save).
#include <torch/torch.h>

#include <unordered_map>
#include <vector>

namespace volt {

class FusedAdamW : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;

  torch::Tensor step(LossClosure closure = nullptr) override;

  // Whether this LibTorch has the fused kernel (2.4 and later); else step() is AdamW's.
  static bool fused_available();

  // Note [A step a graph can replay]. Throws NotSupportedError where the fused kernel is missing.
  void set_capturable(bool capturable);
  bool capturable() const { return capturable_; }
  // Steps, except on the device where `found_inf` (one float element) is nonzero. Capturable only.
  void step_unless(const torch::Tensor& found_inf);
  // Copies each group's learning rate into its device tensor (outside a capture: a replay reads them).
  void refresh_learning_rates();
  // Brings each parameter's host step count up to its device count (reads the device).
  void sync_host_steps();

 private:
  void fused_step();
  void capturable_step(const torch::Tensor& found_inf);
  // The device step count of `param`, made from its host state `state` when new or when the
  // state was replaced (a checkpoint load).
  torch::Tensor& device_step(const torch::Tensor& param, const torch::optim::AdamWParamState& state);

  struct DeviceStep {
    const torch::optim::AdamWParamState* state = nullptr;  // the host state it was made from
    torch::Tensor count;                                   // float, 0-dim, on the parameter's device
  };
  bool capturable_ = false;
  std::unordered_map<const void*, DeviceStep> device_steps_;  // by the parameter's TensorImpl
  std::vector<torch::Tensor> device_lrs_;                     // by group index
};

// Before an optimizer's state is written to a checkpoint: a capturable FusedAdamW's host step
// counts are brought up to date; nothing for any other optimizer.
void prepare_optimizer_state_for_save(torch::optim::Optimizer& optimizer);

}  // namespace volt

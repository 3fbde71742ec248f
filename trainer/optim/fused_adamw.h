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
#include <torch/torch.h>

namespace volt {

class FusedAdamW : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;

  torch::Tensor step(LossClosure closure = nullptr) override;

  // Whether this LibTorch has the fused kernel (2.4 and later); else step() is AdamW's.
  static bool fused_available();
};

}  // namespace volt

#pragma once
// Collectives over many small tensors run on one flat buffer per dtype: one call instead of one per
// tensor. Shared by model averaging (replace_by_mean), DDP's buffer broadcast and SlowMo.
#include <torch/torch.h>

#include <functional>
#include <vector>

namespace volt {

// Copies `tensors` into one flat, contiguous tensor per dtype (in their order; the dtypes in a fixed
// order, so that every rank's calls match), runs `collective` on each, then copies the result back
// into each tensor's own storage, so that optimizers and views keep referring to the same tensors.
// Runs without autograd. Nothing happens for no tensors.
void through_flat_buffers(const std::vector<torch::Tensor>& tensors,
                          const std::function<void(torch::Tensor& flat)>& collective);

}  // namespace volt

#pragma once
#include <torch/torch.h>

#include <map>
#include <string>

namespace volt {

// One mini-batch: the input, the target, and any further named tensors a dataset adds
// (masks, sample weights, ...). All tensors share their first (batch) dimension.
struct Batch {
  torch::Tensor input;
  torch::Tensor target;
  std::map<std::string, torch::Tensor> extras;

  // Number of samples: the first dimension of `input`.
  int64_t size() const;

  // A named extra tensor; throws DataError naming the keys that exist when `name` is absent.
  const torch::Tensor& at(const std::string& name) const;

  // Every defined tensor moved to `device` (a no-op copy of handles when already there).
  Batch to(const torch::Device& device, bool non_blocking = false) const;
};

}  // namespace volt

#include "core/reproducibility.h"

#include <torch/torch.h>

#include "core/compat.h"

namespace volt {

void seed_everything(uint64_t seed) {
  torch::manual_seed(seed);
  if (torch::cuda::is_available()) torch::cuda::manual_seed_all(seed);
}

void set_deterministic(bool enabled) {
  compat::set_deterministic_algorithms(enabled);
  if (enabled) {
    at::globalContext().setDeterministicCuDNN(true);
    at::globalContext().setBenchmarkCuDNN(false);
  }
}

}  // namespace volt

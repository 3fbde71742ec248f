#pragma once
// A module's state dict: its parameters and buffers under PyTorch's names, so that a checkpoint's
// "state_dict" loads into an equivalent torch.nn.Module with module.load_state_dict().
#include <torch/torch.h>

#include <string>
#include <vector>

#include "core/state_dict.h"

namespace volt {

// Every defined parameter and buffer of `module` and its submodules, detached (sharing storage
// with the module), named and ordered as PyTorch's Module.state_dict() does: each module's own
// parameters, then its buffers, modules depth first ("features.0.weight", "features.1.running_mean").
StateDict module_state_dict(const torch::nn::Module& module);

// How a state dict differs from a module's: names only in the module, names only in the state, and
// names whose shapes differ. Empty when they fit.
struct StateDictMismatch {
  std::vector<std::string> missing;      // in the module, not in the state
  std::vector<std::string> unexpected;   // in the state, not in the module
  std::vector<std::string> mis_shaped;   // "name: checkpoint [a, b], model [c, d]"
  bool empty() const { return missing.empty() && unexpected.empty() && mis_shaped.empty(); }
  // One line per non-empty kind, at most 20 names each.
  std::string describe() const;
};

StateDictMismatch compare_state_dict(const torch::nn::Module& module, const StateDict& state);

// Copies `state` into the module's parameters and buffers in place (converting dtype and device),
// so optimizers keep referring to the same tensors. With `strict` every name must match; without
// it, names on one side only are skipped. A shape mismatch or a value that is not a tensor is an
// error either way. Throws CheckpointError naming `source` and every mismatching key.
void load_module_state_dict(torch::nn::Module& module, const StateDict& state, bool strict,
                            const std::string& source);

}  // namespace volt

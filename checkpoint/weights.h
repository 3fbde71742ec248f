#pragma once
// A model's weights alone, as a file PyTorch reads: module.load_state_dict(torch.load(path)).
#include <torch/torch.h>

#include <filesystem>

namespace volt {

// Writes the module's state dict (PyTorch's parameter and buffer names → CPU tensors) as a plain
// dict, atomically and with volt's integrity record. Throws CheckpointError.
void save_weights(const torch::nn::Module& module, const std::filesystem::path& path);

// Loads weights into `module` from a save_weights file, from a volt checkpoint (its
// "state_dict"), or from a Python torch.save(dict(model.state_dict())) file (read unverified:
// it has no integrity record). With `strict`, missing and unexpected names are errors; shape
// mismatches always are. Throws CheckpointError naming every mismatching key.
void load_weights(torch::nn::Module& module, const std::filesystem::path& path, bool strict = true);

}  // namespace volt

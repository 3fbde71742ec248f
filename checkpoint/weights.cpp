#include "checkpoint/weights.h"

#include "checkpoint/checkpoint_io.h"
#include "checkpoint/module_state.h"

namespace volt {

void save_weights(const torch::nn::Module& module, const std::filesystem::path& path) {
  CheckpointIO().save(module_state_dict(module), path);
}

void load_weights(torch::nn::Module& module, const std::filesystem::path& path, bool strict) {
  const StateDict file = read_checkpoint_file(path, /*require_integrity=*/false);
  // A checkpoint keeps the weights under "state_dict"; a weights file is the state dict itself
  // (whose values are all tensors, so it cannot have a dict under that name).
  const bool checkpoint = file.contains("state_dict") && file.at("state_dict").isGenericDict();
  load_module_state_dict(module, checkpoint ? file.child("state_dict") : file, strict,
                         "weights file '" + path.string() + "'");
}

}  // namespace volt

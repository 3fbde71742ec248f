#include "checkpoint/state_dict_bytes.h"

#include <torch/serialize.h>

#include "core/error.h"

namespace volt {

std::string state_dict_to_bytes(const StateDict& state) {
  const auto bytes = torch::pickle_save(state.to_ivalue());
  return std::string(bytes.begin(), bytes.end());
}

StateDict state_dict_from_bytes(const std::string& bytes, const std::string& what) {
  c10::IValue value;
  try {
    value = torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
  } catch (const c10::Error& e) {
    const std::string cause = e.what_without_backtrace();
    throw CheckpointError(what + ": expected the bytes of a pickled state dict, got " + std::to_string(bytes.size()) +
                          " bytes that do not unpickle (" + cause.substr(0, cause.find('\n')) +
                          "); were they written by state_dict_to_bytes?");
  }
  return StateDict::from_ivalue(value, what);
}

}  // namespace volt

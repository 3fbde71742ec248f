#include "checkpoint/module_state.h"

#include <map>
#include <sstream>

#include "core/error.h"

namespace volt {
namespace {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

void append_own(const torch::nn::Module& module, const std::string& prefix, NamedTensors& out) {
  for (const auto& p : module.named_parameters(/*recurse=*/false)) {
    if (p.value().defined()) out.emplace_back(prefix + p.key(), p.value());
  }
  for (const auto& b : module.named_buffers(/*recurse=*/false)) {
    if (b.value().defined()) out.emplace_back(prefix + b.key(), b.value());
  }
}

// name → tensor for the module's parameters and buffers, in PyTorch's state_dict order. The root
// is visited apart from its submodules: named_modules(include_self) needs the root to be owned
// by a shared_ptr, and a module on the stack is not.
NamedTensors named_state(const torch::nn::Module& module) {
  NamedTensors out;
  append_own(module, "", out);
  for (const auto& item : module.named_modules(/*name_prefix=*/"", /*include_self=*/false)) {
    append_own(*item.value(), item.key() + ".", out);
  }
  return out;
}

std::string shape(const c10::IValue& value) {
  if (!value.isTensor()) return std::string("a ") + value.tagKind() + ", not a tensor";
  std::ostringstream out;
  out << value.toTensor().sizes();
  return out.str();
}

void append_list(std::ostringstream& out, const char* title, const std::vector<std::string>& names) {
  if (names.empty()) return;
  constexpr size_t kShown = 20;
  out << "\n  " << title << " (" << names.size() << "): ";
  for (size_t i = 0; i < names.size() && i < kShown; ++i) out << (i ? ", " : "") << names[i];
  if (names.size() > kShown) out << ", ... and " << names.size() - kShown << " more";
}

}  // namespace

StateDict module_state_dict(const torch::nn::Module& module) {
  StateDict state;
  for (const auto& [name, tensor] : named_state(module)) state.set(name, tensor.detach());
  return state;
}

std::string StateDictMismatch::describe() const {
  std::ostringstream out;
  append_list(out, "missing keys (in the model, not in the checkpoint)", missing);
  append_list(out, "unexpected keys (in the checkpoint, not in the model)", unexpected);
  append_list(out, "shape mismatches", mis_shaped);
  return out.str();
}

StateDictMismatch compare_state_dict(const torch::nn::Module& module, const StateDict& state) {
  StateDictMismatch mismatch;
  std::map<std::string, torch::Tensor> expected;
  for (const auto& [name, tensor] : named_state(module)) {
    expected.emplace(name, tensor);
    if (!state.contains(name)) {
      mismatch.missing.push_back(name);
      continue;
    }
    const auto value = state.at(name);
    if (!value.isTensor() || value.toTensor().sizes() != tensor.sizes()) {
      std::ostringstream line;
      line << name << ": checkpoint " << shape(value) << ", model " << tensor.sizes();
      mismatch.mis_shaped.push_back(line.str());
    }
  }
  for (const auto& name : state.keys()) {
    if (!expected.count(name)) mismatch.unexpected.push_back(name);
  }
  return mismatch;
}

void load_module_state_dict(torch::nn::Module& module, const StateDict& state, bool strict,
                            const std::string& source) {
  auto mismatch = compare_state_dict(module, state);
  if (!strict) mismatch.missing.clear(), mismatch.unexpected.clear();
  check<CheckpointError>(mismatch.empty(), source, " does not fit this model:", mismatch.describe(),
                         "\nLoad a checkpoint written for this model",
                         strict ? " (or load weights with strict=false to skip missing and unexpected keys)" : "");
  torch::NoGradGuard no_grad;
  for (const auto& [name, tensor] : named_state(module)) {
    if (state.contains(name)) tensor.copy_(state.get_tensor(name));
  }
}

}  // namespace volt

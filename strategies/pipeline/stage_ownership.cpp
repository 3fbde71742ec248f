#include "strategies/pipeline/stage_ownership.h"

#include "checkpoint/module_state.h"
#include "core/error.h"

#include <sstream>

namespace volt::pipeline {

StageOwnership::StageOwnership(torch::nn::Module& module, const torch::nn::Sequential& layers,
                               const torch::nn::Sequential& stage, bool first_stage,
                               const std::vector<torch::Tensor>& copies)
    : module_(module) {
  for (const auto& c : copies) copies_.insert(c.unsafeGetTensorImpl());
  for (const auto& p : stage->parameters()) owned_.insert(p.unsafeGetTensorImpl());
  for (const auto& b : stage->buffers()) owned_.insert(b.unsafeGetTensorImpl());
  if (!first_stage) return;
  std::set<const void*> in_layers;
  for (const auto& b : layers->buffers()) in_layers.insert(b.unsafeGetTensorImpl());
  for (const auto& b : module.buffers()) {
    if (in_layers.count(b.unsafeGetTensorImpl()) == 0) owned_.insert(b.unsafeGetTensorImpl());
  }
}

void StageOwnership::release() {
  if (released()) return;
  torch::NoGradGuard no_grad;
  for (auto& item : module_.named_parameters()) {
    auto& parameter = item.value();
    if (owns(parameter) || copies_.count(parameter.unsafeGetTensorImpl()) > 0) continue;
    released_.push_back({item.key(), parameter, parameter.sizes().vec()});
    parameter.set_data(torch::empty({0}, parameter.options()));
  }
}

const StageOwnership::Released* StageOwnership::released_entry(const std::string& name) const {
  for (const auto& entry : released_) {
    if (entry.name == name) return &entry;
  }
  return nullptr;
}

std::vector<int64_t> StageOwnership::whole_shape(const std::string& name, const torch::Tensor& parameter) const {
  const auto* released = released_entry(name);
  return released ? released->shape : parameter.sizes().vec();
}

StateDict StageOwnership::owned_state() const {
  StateDict state;
  std::set<std::string> owned_names;
  for (const auto& item : module_.named_parameters()) {
    if (owns(item.value())) owned_names.insert(item.key());
  }
  for (const auto& item : module_.named_buffers()) {
    if (owns(item.value())) owned_names.insert(item.key());
  }
  const StateDict all = module_state_dict(module_);  // detached, in the module's order
  for (const auto& key : all.keys()) {
    if (owned_names.count(key) > 0) state.set(key, all.at(key));
  }
  return state;
}

void StageOwnership::restore(const StateDict& whole) {
  torch::NoGradGuard no_grad;
  for (auto& entry : released_) {
    check<CheckpointError>(whole.contains(entry.name), "pipeline: restoring the model, no value of '", entry.name,
                           "' came back from its stage");
    entry.parameter.set_data(whole.get_tensor(entry.name).to(entry.parameter.options(), false, /*copy=*/true));
  }
  released_.clear();
  for (auto& item : module_.named_parameters()) {
    if (copies_.count(item.value().unsafeGetTensorImpl()) == 0) continue;
    check<CheckpointError>(whole.contains(item.key()), "pipeline: restoring the model, no value of '", item.key(),
                           "' came back from its stage");
    item.value().detach().copy_(whole.get_tensor(item.key()));
  }
}

void StageOwnership::load(const StateDict& state, bool strict, const std::string& source) const {
  std::vector<std::string> missing, unexpected, mis_shaped;
  std::set<std::string> names;
  // `tensor` by value: a handle to the module's own storage, which the copy writes into.
  const auto check_entry = [&](const std::string& name, torch::Tensor tensor) {
    names.insert(name);
    if (!state.contains(name)) {
      missing.push_back(name);
      return;
    }
    const auto* released = released_entry(name);
    const auto shape = released ? released->shape : tensor.sizes().vec();
    const auto value = state.get_tensor(name);
    if (value.sizes().vec() != shape) {
      std::ostringstream line;
      line << name << ": checkpoint " << value.sizes() << ", model " << c10::IntArrayRef(shape);
      mis_shaped.push_back(line.str());
      return;
    }
    if (released == nullptr) {
      torch::NoGradGuard no_grad;
      tensor.copy_(value);
    }
  };
  for (const auto& item : module_.named_parameters()) check_entry(item.key(), item.value());
  for (const auto& item : module_.named_buffers()) check_entry(item.key(), item.value());
  for (const auto& key : state.keys()) {
    if (names.count(key) == 0) unexpected.push_back(key);
  }
  if (!strict) {
    missing.clear();
    unexpected.clear();
  }
  StateDictMismatch mismatch{missing, unexpected, mis_shaped};
  check<CheckpointError>(mismatch.empty(), source, ": the checkpoint's state_dict does not fit the model\n",
                         mismatch.describe());
}

}  // namespace volt::pipeline

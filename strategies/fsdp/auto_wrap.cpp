#include "strategies/fsdp/auto_wrap.h"

namespace volt::fsdp {

namespace {

// Trainable parameter elements in `module` and below.
int64_t trainable_elements(const torch::nn::Module& module) {
  int64_t count = 0;
  for (const auto& p : module.parameters()) {
    if (p.requires_grad()) count += p.numel();
  }
  return count;
}

bool is_container_without_forward(const torch::nn::Module& module) {
  return dynamic_cast<const torch::nn::ModuleListImpl*>(&module) != nullptr ||
         dynamic_cast<const torch::nn::ModuleDictImpl*>(&module) != nullptr;
}

// Wraps below `module`; returns the trainable elements of `module`'s subtree now inside units.
int64_t wrap_below(torch::nn::Module& module, int64_t min_num_params, std::vector<AutoWrapped>& wrapped) {
  auto* sequential = dynamic_cast<torch::nn::SequentialImpl*>(&module);
  int64_t inside_units = 0;
  size_t index = 0;
  for (const auto& child : module.named_children()) {
    auto& child_module = *child.value();
    const int64_t total = trainable_elements(child_module);
    int64_t inside = dynamic_cast<FullyShardedImpl*>(&child_module) != nullptr
                         ? total
                         : wrap_below(child_module, min_num_params, wrapped);
    // A Sequential's children are its entries, registered in order ("0", "1", ...).
    if (sequential != nullptr && inside < total && total - inside >= min_num_params &&
        !is_container_without_forward(child_module) && index < sequential->size()) {
      const auto& entry = *(sequential->begin() + static_cast<std::ptrdiff_t>(index));
      auto unit_module = std::make_shared<FullyShardedImpl>(entry);
      auto replacement = torch::nn::AnyModule(FullyShardedModule(unit_module));
      wrapped.push_back({unit_module, &child_module, replace_sequential_entry(*sequential, index, replacement)});
      inside = total;
    }
    inside_units += inside;
    ++index;
  }
  return inside_units;
}

}  // namespace

void unwrap(const AutoWrapped& wrapped) { restore_sequential_entry(wrapped.entry); }

torch::Tensor UnitForwardWrapper::around(torch::nn::Module&, const std::vector<torch::Tensor>& tensors,
                                         const ModuleForward& forward, bool tensors_complete) {
  ++calls_;
  auto inputs = tensors;  // a unit with frozen parameters passes aliases on instead
  // Inputs the unit cannot see (inside an optional, a container, a struct): not known.
  return forward_in_unit(unit_.get(), [&] { return forward(inputs); }, tensors_complete ? &inputs : nullptr);
}

const WrappedModule* first_never_called(const std::vector<WrappedModule>& wrapped) {
  for (const auto& item : wrapped) {
    if (item.wrapper->calls() == 0) return &item;
  }
  return nullptr;
}

std::vector<WrappedModule> wrap_selected(torch::nn::Module& root, const ModuleSelector& selector,
                                        const std::string& what, bool required) {
  std::vector<WrappedModule> wrapped;
  for (auto& selected : selector.select(root, what, required)) {
    WrappedModule item{selected, std::make_shared<UnitForwardWrapper>(), std::nullopt, what};
    add_forward_wrapper(*selected.module, item.wrapper);
    if (selected.sequential != nullptr)
      item.routed = route_sequential_entry(*selected.sequential, selected.index, *selected.module);
    wrapped.push_back(std::move(item));
  }
  return wrapped;
}

void unwrap(WrappedModule& wrapped) {
  wrapped.wrapper->bind(nullptr);
  remove_forward_wrapper(*wrapped.selected.module, *wrapped.wrapper);
  if (wrapped.routed) restore_sequential_entry(*wrapped.routed);
}

std::vector<AutoWrapped> auto_wrap(torch::nn::Module& root, int64_t min_num_params) {
  std::vector<AutoWrapped> wrapped;
  if (min_num_params > 0) wrap_below(root, min_num_params, wrapped);
  return wrapped;
}

}  // namespace volt::fsdp

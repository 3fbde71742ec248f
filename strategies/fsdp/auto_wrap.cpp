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
      auto& entry = *(sequential->begin() + static_cast<std::ptrdiff_t>(index));
      auto unit_module = std::make_shared<FullyShardedImpl>(entry);
      wrapped.push_back({unit_module, &child_module, sequential, index, entry});
      entry = torch::nn::AnyModule(FullyShardedModule(unit_module));
      inside = total;
    }
    inside_units += inside;
    ++index;
  }
  return inside_units;
}

}  // namespace

void unwrap(const AutoWrapped& wrapped) {
  *(wrapped.parent->begin() + static_cast<std::ptrdiff_t>(wrapped.index)) = wrapped.original;
}

std::vector<AutoWrapped> auto_wrap(torch::nn::Module& root, int64_t min_num_params) {
  std::vector<AutoWrapped> wrapped;
  if (min_num_params > 0) wrap_below(root, min_num_params, wrapped);
  return wrapped;
}

}  // namespace volt::fsdp

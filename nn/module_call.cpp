#include "nn/module_call.h"

#include <c10/util/Type.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <unordered_map>

#include "core/error.h"

namespace volt {
namespace {

// The process-wide table of wrappers by module object. `registered` counts its entries, so that
// a call finds out without the lock that nothing anywhere is wrapped.
struct WrapperTable {
  std::mutex mutex;
  std::unordered_map<const torch::nn::Module*, std::vector<std::shared_ptr<ForwardWrapper>>> by_module;
  std::atomic<int64_t> registered{0};
};

WrapperTable& table() {
  static WrapperTable* instance = new WrapperTable();  // never destroyed: modules may outlive statics
  return *instance;
}

std::vector<std::shared_ptr<ForwardWrapper>> wrappers_of(const torch::nn::Module& module) {
  auto& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  const auto it = t.by_module.find(&module);
  return it == t.by_module.end() ? std::vector<std::shared_ptr<ForwardWrapper>>{} : it->second;
}

// A Sequential's entry that calls the module it replaced through the module's wrappers.
class CalledThroughImpl : public torch::nn::Module {
 public:
  CalledThroughImpl(torch::nn::AnyModule original, torch::nn::Module& target)
      : original_(std::move(original)), target_(target) {}

  torch::Tensor forward(const torch::Tensor& input) {
    if (!has_forward_wrappers(target_)) return original_.forward<torch::Tensor>(input);
    auto entry = original_;  // shares the module: kept for a recompute in the backward
    return run_wrapped_forward(target_, {input}, [entry](const std::vector<torch::Tensor>& given) mutable {
      return entry.forward<torch::Tensor>(given.at(0));
    });
  }

 private:
  torch::nn::AnyModule original_;
  torch::nn::Module& target_;
};

TORCH_MODULE_IMPL(CalledThrough, CalledThroughImpl);

}  // namespace

void add_forward_wrapper(torch::nn::Module& module, std::shared_ptr<ForwardWrapper> wrapper) {
  VOLT_INTERNAL_ASSERT(wrapper != nullptr, "add_forward_wrapper: no wrapper");
  auto& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  auto& wrappers = t.by_module[&module];
  wrappers.push_back(std::move(wrapper));
  // Outermost first; equal depths keep their registration order.
  std::stable_sort(wrappers.begin(), wrappers.end(),
                   [](const auto& a, const auto& b) { return a->depth() < b->depth(); });
  ++t.registered;
}

void remove_forward_wrapper(torch::nn::Module& module, const ForwardWrapper& wrapper) {
  auto& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  const auto it = t.by_module.find(&module);
  if (it == t.by_module.end()) return;
  auto& wrappers = it->second;
  const auto before = wrappers.size();
  std::erase_if(wrappers, [&](const auto& w) { return w.get() == &wrapper; });
  t.registered -= static_cast<int64_t>(before - wrappers.size());
  if (wrappers.empty()) t.by_module.erase(it);
}

bool has_forward_wrappers(const torch::nn::Module& module) {
  auto& t = table();
  if (t.registered.load(std::memory_order_relaxed) == 0) return false;
  std::lock_guard<std::mutex> lock(t.mutex);
  return t.by_module.count(&module) > 0;
}

torch::Tensor run_wrapped_forward(torch::nn::Module& module, const std::vector<torch::Tensor>& tensors,
                                  const ModuleForward& forward, bool tensors_complete) {
  const auto wrappers = wrappers_of(module);
  ModuleForward composed = forward;
  // Innermost first: each wrapper's forward is the composition of those inside it.
  for (auto it = wrappers.rbegin(); it != wrappers.rend(); ++it) {
    composed = [wrapper = *it, target = &module, inner = std::move(composed),
                tensors_complete](const std::vector<torch::Tensor>& given) {
      return wrapper->around(*target, given, inner, tensors_complete);
    };
  }
  return composed(tensors);
}

std::string without_impl_suffix(std::string name) {
  if (name.size() > 4 && name.ends_with("Impl")) name.resize(name.size() - 4);
  return name;
}

std::string module_type_name(const torch::nn::Module& module) {
  return without_impl_suffix(c10::demangle(typeid(module).name()));
}

namespace detail {

void throw_not_a_tensor_forward(const torch::nn::Module& module, const char* result_type) {
  throw ConfigurationError("volt::call: a policy wraps this " + module_type_name(module) +
                           " (activation checkpointing, an fsdp unit), but its forward returns " +
                           c10::demangle(result_type) +
                           "; only a forward that returns one torch::Tensor can be wrapped. Leave the module out "
                           "of the policy, or split its forward so that the wrapped part returns a Tensor");
}

}  // namespace detail

RoutedEntry replace_sequential_entry(torch::nn::SequentialImpl& sequential, size_t index,
                                     torch::nn::AnyModule replacement) {
  VOLT_INTERNAL_ASSERT(index < sequential.size(), "replace_sequential_entry: entry ", index, " of ", sequential.size());
  auto& entry = *(sequential.begin() + static_cast<std::ptrdiff_t>(index));
  RoutedEntry replaced{&sequential, index, entry};
  entry = std::move(replacement);
  return replaced;
}

std::optional<RoutedEntry> route_sequential_entry(torch::nn::SequentialImpl& sequential, size_t index,
                                                  torch::nn::Module& entry_module) {
  VOLT_INTERNAL_ASSERT(index < sequential.size(), "route_sequential_entry: entry ", index, " of ", sequential.size());
  const auto& entry = *(sequential.begin() + static_cast<std::ptrdiff_t>(index));
  if (dynamic_cast<CalledThroughImpl*>(entry.ptr().get()) != nullptr) return std::nullopt;
  return replace_sequential_entry(
      sequential, index, torch::nn::AnyModule(CalledThrough(std::make_shared<CalledThroughImpl>(entry, entry_module))));
}

void restore_sequential_entry(const RoutedEntry& routed) {
  *(routed.sequential->begin() + static_cast<std::ptrdiff_t>(routed.index)) = routed.original;
}

}  // namespace volt

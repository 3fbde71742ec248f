#include "strategies/fsdp/fully_sharded_module.h"

#include <mutex>
#include <unordered_map>

#include "core/error.h"

namespace volt::fsdp {

namespace {

// The modules shard() marked, by address; the weak pointer tells a live module from a new one at
// a freed one's address.
struct Marks {
  std::mutex mutex;
  std::unordered_map<const torch::nn::Module*, std::weak_ptr<torch::nn::Module>> by_module;
};

Marks& marks() {
  static Marks* instance = new Marks();  // never destroyed: modules may outlive statics
  return *instance;
}

}  // namespace

void shard(const std::shared_ptr<torch::nn::Module>& module) {
  check<ConfigurationError>(module != nullptr, "volt::fsdp::shard: expected a module, got nullptr");
  auto& m = marks();
  std::lock_guard<std::mutex> lock(m.mutex);
  std::erase_if(m.by_module, [](const auto& item) { return item.second.expired(); });
  m.by_module[module.get()] = module;
}

bool is_marked_for_sharding(const torch::nn::Module& module) {
  auto& m = marks();
  std::lock_guard<std::mutex> lock(m.mutex);
  const auto it = m.by_module.find(&module);
  if (it == m.by_module.end()) return false;
  const auto alive = it->second.lock();
  return alive != nullptr && alive.get() == &module;
}

FullyShardedImpl::FullyShardedImpl(torch::nn::AnyModule module) : module_(std::move(module)) {
  auto& wrapped = *module_.ptr();
  for (const auto& item : wrapped.named_parameters(/*recurse=*/false)) {
    register_parameter(item.key(), item.value(), item.value().requires_grad());
  }
  for (const auto& item : wrapped.named_buffers(/*recurse=*/false)) register_buffer(item.key(), item.value());
  for (const auto& item : wrapped.named_children()) register_module(item.key(), item.value());
}

torch::Tensor FullyShardedImpl::forward(const torch::Tensor& input) {
  std::vector<torch::Tensor> inputs{input};
  return forward_in_unit(unit_.get(), [&] { return module_.forward<torch::Tensor>(inputs[0]); }, &inputs);
}

torch::Tensor FullyShardedImpl::forward_with(const std::function<torch::Tensor()>& forward) {
  return forward_in_unit(unit_.get(), forward);
}

torch::Tensor forward_in_unit(FullyShardedUnit* unit, const std::function<torch::Tensor()>& forward,
                              std::vector<torch::Tensor>* inputs) {
  if (unit == nullptr) return forward();
  unit->before_forward(inputs);
  torch::Tensor output;
  try {
    output = forward();
  } catch (...) {
    unit->abort_forward();
    throw;
  }
  unit->after_forward(output);
  return output;
}

void FullyShardedImpl::train(bool on) {
  torch::nn::Module::train(on);
  module_.ptr()->train(on);
}

}  // namespace volt::fsdp

#include "strategies/fsdp/fully_sharded_module.h"

namespace volt::fsdp {

FullyShardedImpl::FullyShardedImpl(torch::nn::AnyModule module) : module_(std::move(module)) {
  auto& wrapped = *module_.ptr();
  for (const auto& item : wrapped.named_parameters(/*recurse=*/false)) {
    register_parameter(item.key(), item.value(), item.value().requires_grad());
  }
  for (const auto& item : wrapped.named_buffers(/*recurse=*/false)) register_buffer(item.key(), item.value());
  for (const auto& item : wrapped.named_children()) register_module(item.key(), item.value());
}

torch::Tensor FullyShardedImpl::forward(const torch::Tensor& input) {
  return forward_with([&] { return module_.forward<torch::Tensor>(input); });
}

torch::Tensor FullyShardedImpl::forward_with(const std::function<torch::Tensor()>& forward) {
  return forward_in_unit(unit_.get(), forward);
}

torch::Tensor forward_in_unit(FullyShardedUnit* unit, const std::function<torch::Tensor()>& forward) {
  if (unit == nullptr) return forward();
  unit->before_forward();
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

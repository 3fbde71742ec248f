#pragma once
// The module an FSDP unit runs around (fairscale's wrap()). LibTorch's C++ modules have no forward
// hooks, so a unit is a module of its own that keeps the wrapped module's forward signature
// (Tensor → Tensor) and runs the unit's gather before it and release after it.
//
// Names stay the wrapped module's: the wrapper registers the wrapped module's own parameters,
// buffers and children under their names (sharing them), not the module itself, so
// `wrap(Linear(5, 5))` registered as "fc" has parameters "fc.weight" and "fc.bias" exactly like
// the Linear; checkpoints of wrapped and unwrapped models are interchangeable.
//
// Until a strategy binds a unit to it (fsdp does, at setup), the wrapper only forwards: a model
// built with wrap() runs unchanged under any other strategy or on one process.
//
//   torch::nn::Sequential net{volt::fsdp::wrap(torch::nn::Linear(784, 4096)), torch::nn::ReLU(),
//                             volt::fsdp::wrap(torch::nn::Linear(4096, 10))};
//   auto block = register_module("block", volt::fsdp::wrap(MyBlock()));   // MyBlock: Tensor forward(Tensor)
//   auto y = block->forward_with([&] { return inner_block->forward(x, mask); });  // any other signature
#include <torch/torch.h>

#include <functional>
#include <memory>

#include "strategies/fsdp/fully_sharded_unit.h"

namespace volt::fsdp {

class FullyShardedImpl : public torch::nn::Module {
 public:
  // `module`: any module whose forward takes and returns one Tensor (through AnyModule).
  explicit FullyShardedImpl(torch::nn::AnyModule module);

  // The wrapped module's forward, between the unit's gather and release.
  torch::Tensor forward(const torch::Tensor& input);
  // Runs `forward` (a call of the wrapped module with any signature) between the unit's gather
  // and release; the result is what the unit hooks for its backward.
  torch::Tensor forward_with(const std::function<torch::Tensor()>& forward);

  // train()/eval() reach the wrapped module too (its own flag, e.g. BatchNorm's).
  void train(bool on = true) override;

  torch::nn::Module& wrapped() const { return *module_.ptr(); }
  // Binds the unit the strategy built (nullptr: unbinds; forward then only forwards).
  void bind(std::shared_ptr<FullyShardedUnit> unit) { unit_ = std::move(unit); }
  FullyShardedUnit* unit() const { return unit_.get(); }

 private:
  torch::nn::AnyModule module_;
  std::shared_ptr<FullyShardedUnit> unit_;
};

TORCH_MODULE_IMPL(FullyShardedModule, FullyShardedImpl);

// FSDP2's fully_shard(module), volt's form: marks `module` as a unit of its own under `--strategy
// fsdp`, for a model built where it is known (its constructor, Module::configure_model) rather
// than chosen by an option (wrap=, min_num_params). The module stays as it is: fsdp reaches it
// where the model calls it through volt::call, or as a Sequential's entry (Note [Calling a module
// through volt]); under any other strategy the mark changes nothing. It lasts as long as the
// module; `module` must be held by a shared_ptr (a ModuleHolder, anything register_module gave).
void shard(const std::shared_ptr<torch::nn::Module>& module);
template <typename ModuleType>
void shard(const torch::nn::ModuleHolder<ModuleType>& module) {
  shard(std::static_pointer_cast<torch::nn::Module>(module.ptr()));
}
// Whether shard() marked this module object (and it is still alive).
bool is_marked_for_sharding(const torch::nn::Module& module);

// Runs `forward` between `unit`'s gather and release (abort_forward when it throws); the output is
// what the unit hooks for its backward. `inputs` (null: not known): the tensors `forward` takes,
// which a unit with frozen parameters may replace by aliases before it runs (FullyShardedUnit's
// header): `forward` reads them from there. A null unit: `forward` alone.
torch::Tensor forward_in_unit(FullyShardedUnit* unit, const std::function<torch::Tensor()>& forward,
                              std::vector<torch::Tensor>* inputs = nullptr);

// fairscale's wrap(): marks `module` as an FSDP unit of its own.
template <typename ModuleType>
FullyShardedModule wrap(torch::nn::ModuleHolder<ModuleType> module) {
  return FullyShardedModule(std::make_shared<FullyShardedImpl>(torch::nn::AnyModule(std::move(module))));
}

}  // namespace volt::fsdp

#pragma once
// What Fabric::save and Fabric::load take by name: a module (its parameters and buffers, through
// the strategy's model_state_dict), an optimizer (its state, through the strategy's
// optimizer_state_dict: a sharded optimizer consolidates or writes its shard), or a plain value
// (a number, a string, a tensor, a StateDict's IValue: an epoch counter, a data position).
//   fabric.save("run.ckpt", {{"model", model}, {"optimizer", optimizer}, {"epoch", epoch}});
#include <torch/torch.h>

#include <concepts>
#include <map>
#include <memory>
#include <string>

namespace volt {

class CheckpointItem {
 public:
  enum class Kind { Module, Optimizer, Value };

  template <typename M>
    requires std::derived_from<M, torch::nn::Module>
  CheckpointItem(std::shared_ptr<M> module) : kind_(Kind::Module), module_(std::move(module)) {}
  template <typename O>
    requires std::derived_from<O, torch::optim::Optimizer>
  CheckpointItem(std::shared_ptr<O> optimizer) : kind_(Kind::Optimizer), optimizer_(std::move(optimizer)) {}
  template <typename V>
    requires std::constructible_from<c10::IValue, V> && (!std::is_pointer_v<std::decay_t<V>>)
  CheckpointItem(V value) : kind_(Kind::Value), value_(c10::IValue(std::move(value))) {}

  Kind kind() const { return kind_; }
  const std::shared_ptr<torch::nn::Module>& module() const { return module_; }
  const std::shared_ptr<torch::optim::Optimizer>& optimizer() const { return optimizer_; }
  const c10::IValue& value() const { return value_; }

 private:
  Kind kind_;
  std::shared_ptr<torch::nn::Module> module_;
  std::shared_ptr<torch::optim::Optimizer> optimizer_;
  c10::IValue value_;
};

using CheckpointItems = std::map<std::string, CheckpointItem>;

}  // namespace volt

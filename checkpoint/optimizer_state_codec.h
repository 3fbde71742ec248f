#pragma once
// How one optimizer class's state maps to PyTorch's state_dict layout (optimizer_state.h): each
// param group's options ("lr", "betas", ...) and each parameter's state ("step", "exp_avg", ...)
// under PyTorch's names, so that torch.optim.<name>(params).load_state_dict() reads what volt
// writes. SGD, Adam, AdamW, RMSprop and Adagrad are built in
// (builtin_optimizer_state_codecs.cpp); a user registers a codec for their own optimizer class:
//
//   optimizer_state_codecs().add(optimizer_state_codec<MyOptimizer, MyOptions, MyParamState>(
//       "MyOptimizer",
//       [](const MyOptions& o, StateDict& group) { group.set("lr", o.lr()); },
//       [](MyOptions& o, const StateDict& group) { o.lr(group.get_double("lr")); },
//       [](const MyParamState& p, StateDict& state) { put_state_tensor(state, "buffer", p.buffer()); },
//       [](MyParamState& p, const StateDict& state, const torch::Tensor& parameter, const ParameterContext& c) {
//         p.buffer(take_state_tensor(state, "buffer", parameter, c));
//       }));
//
// An optimizer without a codec is stored as LibTorch's own archive, which Python cannot read.
// Registration is not thread-safe: register at start-up.
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <typeindex>
#include <vector>

#include "core/state_dict.h"

namespace volt {

// Where a value being restored belongs, for messages.
struct ParameterContext {
  std::string what;  // "optimizer 0"
  size_t index = 0;  // the parameter's index across groups
  std::string parameter_name;
  // The state's tensors are the loader's to keep (nobody else holds them): take_state_tensor then
  // keeps a tensor already of the parameter's device and dtype instead of copying it.
  bool take_tensors = false;
  std::string where() const;  // "optimizer 0, parameter 3 (fc.weight)"
};

// Helpers for a codec's functions.
// Stores `tensor` (detached) under `key`; an undefined tensor (state not created yet) is skipped.
void put_state_tensor(StateDict& state, const char* key, const torch::Tensor& tensor);
// PyTorch's "step": a float64 tensor (exact up to 2^53).
void put_step(StateDict& state, int64_t step);
// Reads "step" as a tensor or a number; throws CheckpointError when absent.
int64_t take_step(const StateDict& state, const ParameterContext& context);
// The state tensor `key` as a copy on the parameter's device and dtype; throws CheckpointError for
// a shape that is not the parameter's, or when absent and `required` (else: undefined).
torch::Tensor take_state_tensor(const StateDict& state, const char* key, const torch::Tensor& parameter,
                                const ParameterContext& context, bool required = true);
// A pair of numbers (Adam's betas) as Python's tuple, and back (a tuple or a list).
c10::IValue pair_value(const std::tuple<double, double>& values);
std::tuple<double, double> take_pair(const StateDict& group, const char* key);

struct OptimizerStateCodec {
  std::string name;                    // PyTorch's class name, stored under "volt_optimizer"
  std::type_index type = typeid(void);  // the optimizer class it is registered for
  // Whether it serves an optimizer: the class or a subclass of it.
  std::function<bool(const torch::optim::Optimizer&)> matches;
  std::function<void(const torch::optim::OptimizerOptions&, StateDict& group)> save_options;
  std::function<void(torch::optim::OptimizerOptions&, const StateDict& group)> load_options;
  std::function<void(const torch::optim::OptimizerParamState&, StateDict& state)> save_parameter;
  std::function<std::unique_ptr<torch::optim::OptimizerParamState>(const StateDict& state,
                                                                   const torch::Tensor& parameter,
                                                                   const ParameterContext& context)>
      load_parameter;
};

// A codec for optimizer class `Optimizer`, whose groups hold `Options` and whose parameters hold
// `ParamState`, from functions on those types.
template <typename Optimizer, typename Options, typename ParamState>
OptimizerStateCodec optimizer_state_codec(
    std::string name, std::function<void(const Options&, StateDict&)> save_options,
    std::function<void(Options&, const StateDict&)> load_options,
    std::function<void(const ParamState&, StateDict&)> save_parameter,
    std::function<void(ParamState&, const StateDict&, const torch::Tensor&, const ParameterContext&)> load_parameter) {
  using torch::optim::OptimizerOptions;
  using torch::optim::OptimizerParamState;
  return {std::move(name), typeid(Optimizer),
          [](const torch::optim::Optimizer& optimizer) {
            return dynamic_cast<const Optimizer*>(&optimizer) != nullptr;
          },
          [save_options](const OptimizerOptions& o, StateDict& group) {
            save_options(static_cast<const Options&>(o), group);
          },
          [load_options](OptimizerOptions& o, const StateDict& group) {
            load_options(static_cast<Options&>(o), group);
          },
          [save_parameter](const OptimizerParamState& p, StateDict& state) {
            save_parameter(static_cast<const ParamState&>(p), state);
          },
          [load_parameter](const StateDict& state, const torch::Tensor& parameter, const ParameterContext& context) {
            auto p = std::make_unique<ParamState>();
            load_parameter(*p, state, parameter, context);
            return std::unique_ptr<OptimizerParamState>(std::move(p));
          }};
}

// The codecs by optimizer class.
class OptimizerStateCodecs {
 public:
  // Throws ConfigurationError when the class already has a codec.
  void add(OptimizerStateCodec codec);
  // The codec registered for the optimizer's dynamic type; else the first (in registration order)
  // registered for a base class of it; nullptr when none.
  const OptimizerStateCodec* find(const torch::optim::Optimizer& optimizer) const;
  std::vector<std::string> names() const;

 private:
  std::vector<std::unique_ptr<OptimizerStateCodec>> codecs_;  // stable addresses for find()
};

// The built-ins are registered on first use.
OptimizerStateCodecs& optimizer_state_codecs();

// SGD, Adam, AdamW, RMSprop and Adagrad (builtin_optimizer_state_codecs.cpp).
void register_builtin_optimizer_state_codecs(OptimizerStateCodecs& codecs);

}  // namespace volt

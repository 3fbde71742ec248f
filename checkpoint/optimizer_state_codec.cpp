#include "checkpoint/optimizer_state_codec.h"

#include "core/error.h"

namespace volt {

std::string ParameterContext::where() const {
  return what + ", parameter " + std::to_string(index) + (parameter_name.empty() ? "" : " (" + parameter_name + ")");
}

void put_state_tensor(StateDict& state, const char* key, const torch::Tensor& tensor) {
  if (tensor.defined()) state.set(key, tensor.detach());
}

void put_step(StateDict& state, int64_t step) {
  // A float64 tensor, like PyTorch's own "step" (a tensor since 1.12), but exact up to 2^53.
  state.set("step", torch::scalar_tensor(static_cast<double>(step), torch::kDouble));
}

int64_t take_step(const StateDict& state, const ParameterContext& context) {
  check<CheckpointError>(state.contains("step"), context.where(), ": the state has no 'step'");
  const auto value = state.at("step");
  if (value.isTensor()) return static_cast<int64_t>(value.toTensor().item<double>());
  return static_cast<int64_t>(state.get_double("step"));
}

torch::Tensor take_state_tensor(const StateDict& state, const char* key, const torch::Tensor& parameter,
                                const ParameterContext& context, bool required) {
  if (!state.contains(key)) {
    check<CheckpointError>(!required, context.where(), ": the state has no '", key, "'");
    return {};
  }
  const auto tensor = state.get_tensor(key);
  check<CheckpointError>(tensor.sizes() == parameter.sizes(), context.where(), ": state '", key, "' has shape ",
                         tensor.sizes(), " but the parameter has shape ", parameter.sizes(),
                         "; configure_optimizers must build the same parameter groups as the run that wrote "
                         "the checkpoint");
  return tensor.to(parameter.options(), /*non_blocking=*/false, /*copy=*/!context.take_tensors);
}

c10::IValue pair_value(const std::tuple<double, double>& values) {
  return c10::ivalue::Tuple::create({std::get<0>(values), std::get<1>(values)});
}

std::tuple<double, double> take_pair(const StateDict& group, const char* key) {
  const auto value = group.at(key);
  std::vector<double> items;
  if (value.isTuple()) {
    for (const auto& e : value.toTupleRef().elements()) items.push_back(e.isInt() ? e.toInt() : e.toDouble());
  } else {
    items = group.get_doubles(key);
  }
  check<CheckpointError>(items.size() == 2, "optimizer param group: expected two values for '", key, "', got ",
                         items.size());
  return {items[0], items[1]};
}

void OptimizerStateCodecs::add(OptimizerStateCodec codec) {
  check<ConfigurationError>(!codec.name.empty() && codec.matches && codec.save_options && codec.load_options &&
                                codec.save_parameter && codec.load_parameter,
                            "optimizer state codecs: expected a name and all five functions for '", codec.name,
                            "'; build it with optimizer_state_codec<Optimizer, Options, ParamState>(...)");
  for (const auto& existing : codecs_) {
    check<ConfigurationError>(existing->type != codec.type, "optimizer state codecs: '", codec.name,
                              "' is for a class that already has the codec '", existing->name,
                              "'; register one codec per optimizer class");
  }
  codecs_.push_back(std::make_unique<OptimizerStateCodec>(std::move(codec)));
}

const OptimizerStateCodec* OptimizerStateCodecs::find(const torch::optim::Optimizer& optimizer) const {
  const std::type_index type = typeid(optimizer);
  for (const auto& codec : codecs_) {
    if (codec->type == type) return codec.get();
  }
  for (const auto& codec : codecs_) {
    if (codec->matches(optimizer)) return codec.get();
  }
  return nullptr;
}

std::vector<std::string> OptimizerStateCodecs::names() const {
  std::vector<std::string> out;
  for (const auto& codec : codecs_) out.push_back(codec->name);
  return out;
}

OptimizerStateCodecs& optimizer_state_codecs() {
  static OptimizerStateCodecs codecs = [] {
    OptimizerStateCodecs c;
    register_builtin_optimizer_state_codecs(c);
    return c;
  }();
  return codecs;
}

}  // namespace volt

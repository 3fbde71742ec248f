#include "checkpoint/optimizer_state.h"

#include <cxxabi.h>

#include <cstring>
#include <sstream>

#include "core/compat.h"
#include "core/error.h"

namespace volt {
namespace {

using torch::optim::Optimizer;
using torch::optim::OptimizerOptions;
using torch::optim::OptimizerParamState;

// Where a value being restored belongs, for messages.
struct Context {
  std::string what;  // "optimizer 0"
  size_t index = 0;  // the parameter's index across groups
  std::string parameter_name;
  std::string where() const {
    return what + ", parameter " + std::to_string(index) + (parameter_name.empty() ? "" : " (" + parameter_name + ")");
  }
};

void put(StateDict& state, const char* key, const torch::Tensor& tensor) {
  if (tensor.defined()) state.set(key, tensor.detach());
}

void put_step(StateDict& state, int64_t step) {
  // A float64 tensor, like PyTorch's own "step" (a tensor since 1.12), but exact up to 2^53.
  state.set("step", torch::scalar_tensor(static_cast<double>(step), torch::kDouble));
}

int64_t take_step(const StateDict& state, const Context& context) {
  check<CheckpointError>(state.contains("step"), context.where(), ": the state has no 'step'");
  const auto value = state.at("step");
  if (value.isTensor()) return static_cast<int64_t>(value.toTensor().item<double>());
  return static_cast<int64_t>(state.get_double("step"));
}

// The state tensor `key` on the parameter's device and dtype, a copy (never aliasing the
// checkpoint's tensors); undefined when absent and optional.
torch::Tensor take(const StateDict& state, const char* key, const torch::Tensor& parameter,
                   const Context& context, bool required = true) {
  if (!state.contains(key)) {
    check<CheckpointError>(!required, context.where(), ": the state has no '", key, "'");
    return {};
  }
  const auto tensor = state.get_tensor(key);
  check<CheckpointError>(tensor.sizes() == parameter.sizes(), context.where(), ": state '", key, "' has shape ",
                         tensor.sizes(), " but the parameter has shape ", parameter.sizes(),
                         "; configure_optimizers must build the same parameter groups as the run that wrote "
                         "the checkpoint");
  return tensor.to(parameter.options(), /*non_blocking=*/false, /*copy=*/true);
}

c10::IValue pair(const std::tuple<double, double>& values) {
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

// How one optimizer class maps to PyTorch's names.
struct Codec {
  const char* name;
  std::function<bool(const Optimizer&)> matches;
  std::function<void(const OptimizerOptions&, StateDict&)> save_options;
  std::function<void(OptimizerOptions&, const StateDict&)> load_options;
  std::function<void(const OptimizerParamState&, StateDict&)> save_parameter;
  std::function<std::unique_ptr<OptimizerParamState>(const StateDict&, const torch::Tensor&, const Context&)>
      load_parameter;
};

template <typename O>
bool is(const Optimizer& optimizer) {
  return dynamic_cast<const O*>(&optimizer) != nullptr;
}

// Adam and AdamW have the same fields under different types.
template <typename O, typename Options, typename ParamState>
Codec adam_like(const char* name) {
  return {name, is<O>,
          [](const OptimizerOptions& base, StateDict& g) {
            const auto& o = static_cast<const Options&>(base);
            g.set("lr", o.lr());
            g.set("betas", pair(o.betas()));
            g.set("eps", o.eps());
            g.set("weight_decay", o.weight_decay());
            g.set("amsgrad", o.amsgrad());
          },
          [](OptimizerOptions& base, const StateDict& g) {
            auto& o = static_cast<Options&>(base);
            o.lr(g.get_double("lr")).betas(take_pair(g, "betas")).eps(g.get_double("eps"));
            o.weight_decay(g.get_double("weight_decay")).amsgrad(g.get_bool("amsgrad"));
          },
          [](const OptimizerParamState& base, StateDict& s) {
            const auto& p = static_cast<const ParamState&>(base);
            put_step(s, p.step());
            put(s, "exp_avg", p.exp_avg());
            put(s, "exp_avg_sq", p.exp_avg_sq());
            put(s, "max_exp_avg_sq", p.max_exp_avg_sq());
          },
          [](const StateDict& s, const torch::Tensor& param, const Context& c) {
            auto p = std::make_unique<ParamState>();
            p->step(take_step(s, c));
            p->exp_avg(take(s, "exp_avg", param, c));
            p->exp_avg_sq(take(s, "exp_avg_sq", param, c));
            p->max_exp_avg_sq(take(s, "max_exp_avg_sq", param, c, /*required=*/false));
            return p;
          }};
}

const std::vector<Codec>& codecs() {
  namespace o = torch::optim;
  static const std::vector<Codec> all{
      {"SGD", is<o::SGD>,
       [](const OptimizerOptions& base, StateDict& g) {
         const auto& opt = static_cast<const o::SGDOptions&>(base);
         g.set("lr", opt.lr());
         g.set("momentum", opt.momentum());
         g.set("dampening", opt.dampening());
         g.set("weight_decay", opt.weight_decay());
         g.set("nesterov", opt.nesterov());
       },
       [](OptimizerOptions& base, const StateDict& g) {
         auto& opt = static_cast<o::SGDOptions&>(base);
         opt.lr(g.get_double("lr")).momentum(g.get_double("momentum")).dampening(g.get_double("dampening"));
         opt.weight_decay(g.get_double("weight_decay")).nesterov(g.get_bool("nesterov"));
       },
       [](const OptimizerParamState& base, StateDict& s) {
         put(s, "momentum_buffer", static_cast<const o::SGDParamState&>(base).momentum_buffer());
       },
       [](const StateDict& s, const torch::Tensor& param, const Context& c) {
         auto p = std::make_unique<o::SGDParamState>();
         p->momentum_buffer(take(s, "momentum_buffer", param, c, /*required=*/false));
         return p;
       }},
      adam_like<o::Adam, o::AdamOptions, o::AdamParamState>("Adam"),
      adam_like<o::AdamW, o::AdamWOptions, o::AdamWParamState>("AdamW"),
      {"RMSprop", is<o::RMSprop>,
       [](const OptimizerOptions& base, StateDict& g) {
         const auto& opt = static_cast<const o::RMSpropOptions&>(base);
         g.set("lr", opt.lr());
         g.set("alpha", opt.alpha());
         g.set("eps", opt.eps());
         g.set("weight_decay", opt.weight_decay());
         g.set("momentum", opt.momentum());
         g.set("centered", opt.centered());
       },
       [](OptimizerOptions& base, const StateDict& g) {
         auto& opt = static_cast<o::RMSpropOptions&>(base);
         opt.lr(g.get_double("lr")).alpha(g.get_double("alpha")).eps(g.get_double("eps"));
         opt.weight_decay(g.get_double("weight_decay")).momentum(g.get_double("momentum"));
         opt.centered(g.get_bool("centered"));
       },
       [](const OptimizerParamState& base, StateDict& s) {
         const auto& p = static_cast<const o::RMSpropParamState&>(base);
         put_step(s, p.step());
         put(s, "square_avg", p.square_avg());
         put(s, "momentum_buffer", p.momentum_buffer());
         put(s, "grad_avg", p.grad_avg());
       },
       [](const StateDict& s, const torch::Tensor& param, const Context& c) {
         auto p = std::make_unique<o::RMSpropParamState>();
         p->step(take_step(s, c));
         p->square_avg(take(s, "square_avg", param, c));
         p->momentum_buffer(take(s, "momentum_buffer", param, c, /*required=*/false));
         p->grad_avg(take(s, "grad_avg", param, c, /*required=*/false));
         return p;
       }},
      {"Adagrad", is<o::Adagrad>,
       [](const OptimizerOptions& base, StateDict& g) {
         const auto& opt = static_cast<const o::AdagradOptions&>(base);
         g.set("lr", opt.lr());
         g.set("lr_decay", opt.lr_decay());
         g.set("weight_decay", opt.weight_decay());
         g.set("initial_accumulator_value", opt.initial_accumulator_value());
         g.set("eps", opt.eps());
       },
       [](OptimizerOptions& base, const StateDict& g) {
         auto& opt = static_cast<o::AdagradOptions&>(base);
         opt.lr(g.get_double("lr")).lr_decay(g.get_double("lr_decay")).weight_decay(g.get_double("weight_decay"));
         opt.initial_accumulator_value(g.get_double("initial_accumulator_value")).eps(g.get_double("eps"));
       },
       [](const OptimizerParamState& base, StateDict& s) {
         const auto& p = static_cast<const o::AdagradParamState&>(base);
         put_step(s, p.step());
         put(s, "sum", p.sum());
       },
       [](const StateDict& s, const torch::Tensor& param, const Context& c) {
         auto p = std::make_unique<o::AdagradParamState>();
         p->step(take_step(s, c));
         p->sum(take(s, "sum", param, c));
         return p;
       }},
  };
  return all;
}

const Codec* codec_for(const Optimizer& optimizer) {
  for (const auto& codec : codecs()) {
    if (codec.matches(optimizer)) return &codec;
  }
  return nullptr;
}

std::string type_name(const Optimizer& optimizer) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(abi::__cxa_demangle(typeid(optimizer).name(), nullptr, nullptr, &status),
                                              std::free);
  return status == 0 && name ? name.get() : typeid(optimizer).name();
}

// Any other optimizer: LibTorch's own serialization of it, as bytes.
StateDict archive_state_dict(const Optimizer& optimizer) {
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  std::ostringstream bytes;
  archive.save_to(bytes);
  const std::string data = bytes.str();
  auto tensor = torch::empty({static_cast<int64_t>(data.size())}, torch::kUInt8);
  std::memcpy(tensor.data_ptr(), data.data(), data.size());
  {
    torch::serialize::InputArchive check_archive;
    check_archive.load_from(data.data(), data.size());
    check<NotSupportedError>(optimizer.state().empty() || !check_archive.keys().empty(), "checkpoint: ",
                             type_name(optimizer), " is not one of SGD, Adam, AdamW, RMSprop, Adagrad, and its save() "
                             "writes nothing, so its state would be lost; implement save() and load() for it");
  }
  StateDict state;
  state.set("volt_optimizer", type_name(optimizer));
  state.set("libtorch_archive", tensor);
  return state;
}

// LibTorch's Optimizer::load restores the per-parameter state but keeps the optimizer's own group
// options, while the state was built under the saved ones (an LBFGS history sized by the saved
// history_size would be indexed past the new one's). Like PyTorch's load_state_dict, the saved
// options replace the current ones; each group's options read themselves (a virtual serialize),
// so this works for any optimizer type.
void load_archive_group_options(Optimizer& optimizer, torch::serialize::InputArchive& archive) {
  torch::serialize::InputArchive groups_archive;
  archive.read("param_groups", groups_archive);
  torch::Tensor count;
  groups_archive.read("param_groups/size", count);
  auto& groups = optimizer.param_groups();
  check<CheckpointError>(count.item<int64_t>() == static_cast<int64_t>(groups.size()), "the checkpoint has ",
                         count.item<int64_t>(), " param groups but this optimizer has ", groups.size());
  for (size_t i = 0; i < groups.size(); ++i) {
    torch::serialize::InputArchive group_archive, options_archive;
    groups_archive.read("param_groups/" + std::to_string(i), group_archive);
    group_archive.read("options", options_archive);
    groups[i].options().serialize(options_archive);
  }
}

}  // namespace

StateDict optimizer_state_dict(const Optimizer& optimizer) {
  const Codec* codec = codec_for(optimizer);
  if (codec == nullptr) return archive_state_dict(optimizer);
  c10::impl::GenericDict per_parameter(c10::IntType::get(), c10::AnyType::get());
  c10::impl::GenericList groups(c10::AnyType::get());
  int64_t index = 0;
  for (const auto& group : optimizer.param_groups()) {
    StateDict saved_group;
    codec->save_options(group.options(), saved_group);
    c10::impl::GenericList indices(c10::AnyType::get());
    for (const auto& parameter : group.params()) {
      auto found = optimizer.state().find(compat::optimizer_state_key(parameter));
      if (found != optimizer.state().end()) {
        StateDict saved;
        codec->save_parameter(*found->second, saved);
        per_parameter.insert(index, saved.to_ivalue());
      }
      indices.push_back(index++);
    }
    saved_group.set("params", indices);
    groups.push_back(saved_group.to_ivalue());
  }
  StateDict state;
  state.set("state", per_parameter);
  state.set("param_groups", groups);
  state.set("volt_optimizer", codec->name);
  return state;
}

void load_optimizer_state_dict(Optimizer& optimizer, const StateDict& state, const std::string& what,
                               const ParameterNamer& name_of) {
  const Codec* codec = codec_for(optimizer);
  const std::string saved_type = state.contains("volt_optimizer") ? state.get_string("volt_optimizer") : "";
  const std::string current_type = codec ? codec->name : type_name(optimizer);
  check<CheckpointError>(saved_type.empty() || saved_type == current_type, what, ": the checkpoint holds ",
                         saved_type, " state but this run's optimizer is ", current_type,
                         "; configure_optimizers must build the same optimizers as the run that wrote the checkpoint");
  if (codec == nullptr) {
    const auto bytes = state.get_tensor("libtorch_archive").contiguous();
    try {
      torch::serialize::InputArchive archive;
      archive.load_from(static_cast<const char*>(bytes.data_ptr()), static_cast<size_t>(bytes.numel()));
      optimizer.load(archive);
      load_archive_group_options(optimizer, archive);
    } catch (const CheckpointError& error) {
      throw CheckpointError(what + ": cannot restore " + current_type + " state: " + error.what() +
                            "; configure_optimizers must build the same optimizer as the run that wrote the checkpoint");
    } catch (const c10::Error& error) {
      throw CheckpointError(what + ": cannot restore " + current_type + " state: " + error.what_without_backtrace() +
                            "; configure_optimizers must build the same optimizer as the run that wrote the checkpoint");
    } catch (const std::exception& error) {  // LibTorch's own loaders also throw standard exceptions
      throw CheckpointError(what + ": cannot restore " + current_type + " state (" + error.what() +
                            "); configure_optimizers must build the same optimizer as the run that wrote the checkpoint");
    }
    return;
  }

  const auto saved_groups = state.at("param_groups");
  check<CheckpointError>(saved_groups.isList(), what, ": 'param_groups' is not a list");
  const auto& groups_list = saved_groups.toListRef();
  auto& groups = optimizer.param_groups();
  auto describe_sizes = [&](auto sizes) {
    std::string out;
    for (auto n : sizes) out += (out.empty() ? "" : ", ") + std::to_string(n);
    return "[" + out + "]";
  };
  std::vector<size_t> saved_sizes, current_sizes;
  std::vector<StateDict> saved;
  for (const auto& g : groups_list) {
    saved.push_back(StateDict::from_ivalue(g, what + " param group"));
    saved_sizes.push_back(saved.back().get_ints("params").size());
  }
  for (const auto& g : groups) current_sizes.push_back(g.params().size());
  check<CheckpointError>(saved_sizes == current_sizes, what, ": the checkpoint has param groups of sizes ",
                         describe_sizes(saved_sizes), " but this optimizer has ", describe_sizes(current_sizes),
                         "; configure_optimizers must build the same parameter groups as the run that wrote "
                         "the checkpoint");

  const auto per_parameter_value = state.at("state");
  check<CheckpointError>(per_parameter_value.isGenericDict(), what, ": 'state' is not a dict");
  const auto per_parameter = per_parameter_value.toGenericDict();
  auto& states = optimizer.state();
  for (size_t g = 0; g < groups.size(); ++g) {
    codec->load_options(groups[g].options(), saved[g]);
    const auto indices = saved[g].get_ints("params");
    for (size_t i = 0; i < indices.size(); ++i) {
      const auto& parameter = groups[g].params()[i];
      const auto key = compat::optimizer_state_key(parameter);
      auto found = per_parameter.find(c10::IValue(indices[i]));
      if (found == per_parameter.end()) {
        states.erase(key);
        continue;
      }
      Context context{what, static_cast<size_t>(indices[i]), name_of ? name_of(parameter) : ""};
      states[key] = codec->load_parameter(StateDict::from_ivalue(found->value(), context.where()), parameter, context);
    }
  }
}

}  // namespace volt

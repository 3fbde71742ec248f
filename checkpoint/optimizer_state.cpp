#include "checkpoint/optimizer_state.h"

#include <cxxabi.h>

#include <cstring>
#include <map>
#include <memory>
#include <sstream>

#include "checkpoint/optimizer_state_codec.h"
#include "core/compat.h"
#include "core/error.h"
#include "core/option_spec.h"  // join

namespace volt {
namespace {

using torch::optim::Optimizer;

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
                             type_name(optimizer), " is not one of ", join(optimizer_state_codecs().names()),
                             ", and its save() writes nothing, so its state would be lost; implement save() and load() "
                             "for it, or register an OptimizerStateCodec (optimizer_state_codec.h)");
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
  const OptimizerStateCodec* codec = optimizer_state_codecs().find(optimizer);
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
                               const ParameterNamer& name_of, bool take_tensors) {
  const OptimizerStateCodec* codec = optimizer_state_codecs().find(optimizer);
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
      throw CheckpointError(
          what + ": cannot restore " + current_type + " state: " + error.what() +
          "; configure_optimizers must build the same optimizer as the run that wrote the checkpoint");
    } catch (const c10::Error& error) {
      throw CheckpointError(
          what + ": cannot restore " + current_type + " state: " + error.what_without_backtrace() +
          "; configure_optimizers must build the same optimizer as the run that wrote the checkpoint");
    } catch (const std::exception& error) {  // LibTorch's own loaders also throw standard exceptions
      throw CheckpointError(
          what + ": cannot restore " + current_type + " state (" + error.what() +
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
      ParameterContext context{what, static_cast<size_t>(indices[i]), name_of ? name_of(parameter) : "", take_tensors};
      states[key] = codec->load_parameter(StateDict::from_ivalue(found->value(), context.where()), parameter, context);
    }
  }
}

ParameterNamer parameter_namer(const torch::nn::Module& module) {
  auto names = std::make_shared<std::map<const void*, std::string>>();
  for (const auto& p : module.named_parameters()) names->emplace(p.value().unsafeGetTensorImpl(), p.key());
  return [names](const torch::Tensor& p) {
    const auto found = names->find(p.unsafeGetTensorImpl());
    return found == names->end() ? std::string() : found->second;
  };
}

std::optional<c10::impl::GenericDict> optimizer_state_at(const c10::impl::GenericDict& states, int64_t index) {
  for (const auto& item : states) {
    if ((item.key().isInt() && item.key().toInt() == index) ||
        (item.key().isString() && item.key().toStringRef() == std::to_string(index))) {
      return item.value().toGenericDict();
    }
  }
  return std::nullopt;
}

StateDict param_group_options(const c10::IValue& group, const std::string& what) {
  const auto saved = StateDict::from_ivalue(group, what);
  StateDict options;
  for (const auto& key : saved.keys()) {
    if (key != "params") options.set(key, saved.at(key));
  }
  return options;
}

}  // namespace volt

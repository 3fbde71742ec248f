#include "nn/module_selection.h"

#include <set>
#include <sstream>

#include "core/error.h"
#include "nn/module_call.h"

namespace volt {

bool valid_module_types(const std::string& names) {
  if (names.empty() || names.front() == '|' || names.back() == '|') return false;
  return names.find("||") == std::string::npos;
}

ModuleSelector ModuleSelector::by_type(const std::string& names) {
  std::set<std::string> types;
  std::stringstream in(names);
  std::string name;
  while (std::getline(in, name, '|')) {
    check<ConfigurationError>(!name.empty(), "a module type list expects names joined by '|' (Block|MLP), got '",
                              names, "'");
    types.insert(without_impl_suffix(name));
  }
  check<ConfigurationError>(!types.empty(), "a module type list expects at least one name (Block), got nothing");
  return ModuleSelector(
      [types](const std::string&, const torch::nn::Module& module) {
        const auto type = module_type_name(module);
        if (types.count(type)) return true;
        const auto last = type.rfind("::");  // "Linear" names torch::nn::Linear too
        return last != std::string::npos && types.count(type.substr(last + 2)) > 0;
      },
      "type " + names);
}

ModuleSelector ModuleSelector::by_predicate(Predicate predicate, std::string description) {
  check<ConfigurationError>(static_cast<bool>(predicate), "ModuleSelector::by_predicate: no predicate given");
  return ModuleSelector(std::move(predicate), std::move(description));
}

std::vector<SelectedModule> ModuleSelector::select(torch::nn::Module& root, const std::string& what,
                                                   bool required) const {
  std::vector<SelectedModule> selected;
  std::set<std::string> types_seen;
  std::set<const torch::nn::Module*> visited;
  std::function<void(torch::nn::Module&, const std::string&)> walk = [&](torch::nn::Module& module,
                                                                          const std::string& prefix) {
    auto* sequential = dynamic_cast<torch::nn::SequentialImpl*>(&module);
    size_t index = 0;
    // A Sequential's children are its entries, registered in order ("0", "1", ...).
    for (const auto& child : module.named_children()) {
      auto& child_module = *child.value();
      const auto path = prefix + child.key();
      types_seen.insert(module_type_name(child_module));
      if (!visited.insert(&child_module).second) {
        ++index;
        continue;  // a module registered twice (shared) is selected, and searched, once
      }
      if (predicate_(path, child_module)) {
        const bool is_entry = sequential != nullptr && index < sequential->size();
        selected.push_back({path, &child_module, is_entry ? sequential : nullptr, index});
      } else {
        walk(child_module, path + ".");
      }
      ++index;
    }
  };
  walk(root, "");
  if (selected.empty() && required) {
    std::string types;
    for (const auto& type : types_seen) types += (types.empty() ? "" : ", ") + type;
    throw ConfigurationError(what + " selects the modules of " + description_ +
                             ", and the model has none (its module types: " + (types.empty() ? "none" : types) +
                             "); name one of its types, or drop the option");
  }
  return selected;
}

}  // namespace volt

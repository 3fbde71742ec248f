#pragma once
// Which modules of a model a policy names (activation_checkpointing=Block, fsdp:wrap=Block): by
// type, `Block` or `torch::nn::Linear` as module_type_name() writes them (several joined by
// `|`), or by a C++ predicate over the module's path and object. The walk starts below the root
// (the root is never selected) and does not descend into a selected module: a Block inside a
// selected Block is the outer one's business.
#include <torch/torch.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace volt {

struct SelectedModule {
  std::string path;                                 // "blocks.0"
  torch::nn::Module* module;
  torch::nn::SequentialImpl* sequential = nullptr;  // the Sequential it is an entry of, if any
  size_t index = 0;                                 // its entry there
};

// Whether `names` is a list ModuleSelector::by_type takes: names joined by '|', none empty.
bool valid_module_types(const std::string& names);

class ModuleSelector {
 public:
  using Predicate = std::function<bool(const std::string& path, const torch::nn::Module& module)>;

  // "Block|torch::nn::Linear". Throws ConfigurationError on an empty name.
  static ModuleSelector by_type(const std::string& names);
  // `description` names the predicate in messages ("blocks with a mask").
  static ModuleSelector by_predicate(Predicate predicate, std::string description);

  // The selected modules, in module order. Throws ConfigurationError, naming `what` (the option),
  // the selector and the model's module types, when nothing is selected and `required`.
  std::vector<SelectedModule> select(torch::nn::Module& root, const std::string& what, bool required = true) const;
  const std::string& description() const { return description_; }

 private:
  ModuleSelector(Predicate predicate, std::string description)
      : predicate_(std::move(predicate)), description_(std::move(description)) {}
  Predicate predicate_;
  std::string description_;
};

}  // namespace volt

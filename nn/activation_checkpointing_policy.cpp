#include "nn/activation_checkpointing_policy.h"

#include "core/error.h"

namespace volt {

class CheckpointedModules::Wrapper : public ForwardWrapper {
 public:
  explicit Wrapper(CheckpointOptions options) : options_(options) {}
  int depth() const override { return kCheckpointingDepth; }

  torch::Tensor around(torch::nn::Module& module, const std::vector<torch::Tensor>& tensors,
                       const ModuleForward& forward, bool /*tensors_complete*/) override {
    if (!torch::GradMode::is_enabled()) return forward(tensors);  // nothing kept to save
    ++calls;
    auto outputs = checkpoint([forward](const std::vector<torch::Tensor>& given) {
                                return std::vector<torch::Tensor>{forward(given)};
                              },
                              tensors, module.parameters(), module.buffers(), options_);
    return outputs.front();
  }

  std::atomic<int64_t> calls{0};

 private:
  CheckpointOptions options_;
};

CheckpointedModules::CheckpointedModules(torch::nn::Module& root, const ModuleSelector& selector,
                                         const std::string& what, CheckpointOptions options)
    : modules_(selector.select(root, what)), wrapper_(std::make_shared<Wrapper>(options)) {
  for (const auto& selected : modules_) {
    add_forward_wrapper(*selected.module, wrapper_);
    if (selected.sequential != nullptr) {
      if (auto routed = route_sequential_entry(*selected.sequential, selected.index, *selected.module))
        routed_.push_back(std::move(*routed));
    }
  }
}

CheckpointedModules::~CheckpointedModules() {
  for (auto it = routed_.rbegin(); it != routed_.rend(); ++it) restore_sequential_entry(*it);
  for (const auto& selected : modules_) remove_forward_wrapper(*selected.module, *wrapper_);
}

int64_t CheckpointedModules::calls() const { return wrapper_->calls.load(); }

void CheckpointedModules::check_reached(const std::string& what) const {
  if (calls() > 0) return;
  const auto& first = modules_.front();
  throw ConfigurationError(what + " selected " + std::to_string(modules_.size()) + " module(s) ('" + first.path +
                           "', a " + module_type_name(*first.module) +
                           ", first), but none of them ran through volt::call with gradients on during the first "
                           "training step: LibTorch "
                           "cannot intercept `" + first.path + "->forward(...)`. Call them as volt::call(" +
                           first.path + ", args...) (nn/module_call.h), or put them in a torch::nn::Sequential");
}

}  // namespace volt

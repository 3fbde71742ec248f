#pragma once
// Activation checkpointing by policy (PyTorch's apply_activation_checkpointing, Lightning's
// activation_checkpointing_policy): every module a ModuleSelector selects runs its forward
// checkpointed (Note [Recomputed forwards]) whenever it is called through volt::call or as a
// Sequential's entry (Note [Calling a module through volt]). Strategies apply it from their
// `activation_checkpointing=<types>` option before they wrap the model, so that FSDP's unit gathers
// around the checkpointed forward and the recompute in the backward finds the unit gathered again.
//
// What is supported: a forward that returns one Tensor and whose effects beyond its output are on
// its own buffers (BatchNorm's running statistics, put back after the recompute). Anything else it
// changes (a counter, a cache, a list it appends to) changes twice per step; randomness is drawn
// the same both times (dropout). Under NoGradGuard (evaluation) the forward runs as it is.
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nn/activation_checkpoint.h"
#include "nn/module_call.h"
#include "nn/module_selection.h"

namespace volt {

class CheckpointedModules {
 public:
  // Checkpoints the modules `selector` selects in `root` (an error naming `what`, the option,
  // when it selects none).
  CheckpointedModules(torch::nn::Module& root, const ModuleSelector& selector, const std::string& what,
                      CheckpointOptions options = {});
  // Removes the wrappers and puts the Sequentials' entries back.
  ~CheckpointedModules();
  CheckpointedModules(const CheckpointedModules&) = delete;
  CheckpointedModules& operator=(const CheckpointedModules&) = delete;

  const std::vector<SelectedModule>& modules() const { return modules_; }
  // Forwards of the selected modules checkpointed so far (those run under NoGradGuard are not).
  int64_t calls() const;
  // After the first training step: throws ConfigurationError, naming `what`, when no selected
  // module was checkpointed (a forward calls them as block->forward(...), which nothing
  // intercepts). One reached module is enough: a module that a step does not use is no error.
  void check_reached(const std::string& what) const;

 private:
  class Wrapper;
  std::vector<SelectedModule> modules_;
  std::shared_ptr<Wrapper> wrapper_;
  std::vector<RoutedEntry> routed_;
};

}  // namespace volt

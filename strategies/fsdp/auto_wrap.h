#pragma once
// fairscale's auto_wrap with its default policy (min_num_params): walking the model from the
// root, every module whose parameters not yet inside a unit number at least min_num_params
// becomes a unit, children before parents, so large blocks get units of their own and what
// remains of a large parent gets one around it. Containers without a forward (ModuleList,
// ModuleDict) are never wrapped themselves; modules already wrapped by hand are left as they are.
//
// What C++ lets it reach: a unit must sit where its parent's forward calls it, and LibTorch only
// lets volt change that call inside a torch::nn::Sequential (its forward calls its entries, which
// can be replaced). So auto-wrap wraps children of Sequentials (at any depth), whose forward takes
// and returns one Tensor. A module that a user's forward calls through a member (fc1->forward(x))
// cannot be intercepted: its parameters belong to the nearest enclosing unit (often the root)
// unless the model wraps it with fsdp::wrap(). The names of parameters do not change.
//
// By type (fsdp:wrap=Block, PyTorch's ModuleWrapPolicy), or marked by fsdp::shard(): every such
// module, in any container, becomes a unit through a forward wrapper (Note [Calling a module through volt]) that
// runs its calls through volt::call, and its Sequential entry, if it is one, between the unit's
// gather and release. The module stays where it is; nothing else of the model changes.
#include <torch/torch.h>

#include <memory>
#include <vector>

#include "nn/module_call.h"
#include "nn/module_selection.h"
#include "strategies/fsdp/fully_sharded_module.h"

namespace volt::fsdp {

struct AutoWrapped {
  std::shared_ptr<FullyShardedImpl> unit_module;  // the wrapper now in the Sequential's forward
  torch::nn::Module* tree_module;                 // the wrapped module, where it stays registered
  RoutedEntry entry;                              // the wrapper's entry, and the one it replaced
};

// Wraps the children of `root`'s Sequentials that the policy selects; returns them, outermost
// last. min_num_params <= 0: none.
std::vector<AutoWrapped> auto_wrap(torch::nn::Module& root, int64_t min_num_params);

// Puts the entry back as it was before auto_wrap.
void unwrap(const AutoWrapped& wrapped);

// A unit's forward wrapper, bound to its unit once the strategy built it (until then, and after
// unbinding, it only forwards).
class UnitForwardWrapper : public ForwardWrapper {
 public:
  int depth() const override { return kUnitDepth; }
  torch::Tensor around(torch::nn::Module& module, const std::vector<torch::Tensor>& tensors,
                       const ModuleForward& forward, bool tensors_complete) override;
  void bind(std::shared_ptr<FullyShardedUnit> unit) { unit_ = std::move(unit); }
  // Forwards run through it so far.
  int64_t calls() const { return calls_; }

 private:
  std::shared_ptr<FullyShardedUnit> unit_;
  int64_t calls_ = 0;
};

struct WrappedModule {
  SelectedModule selected;
  std::shared_ptr<UnitForwardWrapper> wrapper;
  std::optional<RoutedEntry> routed;  // its Sequential entry, routed through the wrapper
  std::string origin;  // what chose it, for messages: "--strategy fsdp:wrap=Block", "volt::fsdp::shard"
};

// Makes every module `selector` selects below `root` a unit's site; `what` is the choice's name
// (its origin, and the error when `required` and it selects none).
std::vector<WrappedModule> wrap_selected(torch::nn::Module& root, const ModuleSelector& selector,
                                        const std::string& what, bool required = true);
// Unbinds the wrapper, removes it and puts the entry back.
void unwrap(WrappedModule& wrapped);
// The first of `wrapped` whose module has not run through its wrapper yet; null when all have.
const WrappedModule* first_never_called(const std::vector<WrappedModule>& wrapped);

}  // namespace volt::fsdp

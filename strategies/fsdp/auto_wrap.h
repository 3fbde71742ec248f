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
#include <torch/torch.h>

#include <memory>
#include <vector>

#include "strategies/fsdp/fully_sharded_module.h"

namespace volt::fsdp {

struct AutoWrapped {
  std::shared_ptr<FullyShardedImpl> unit_module;  // the wrapper now in the Sequential's forward
  torch::nn::Module* tree_module;                 // the wrapped module, where it stays registered
  torch::nn::SequentialImpl* parent;              // the Sequential, and the wrapper's entry in it
  size_t index;
  torch::nn::AnyModule original;                  // the entry before wrapping
};

// Wraps the children of `root`'s Sequentials that the policy selects; returns them, outermost
// last. min_num_params <= 0: none.
std::vector<AutoWrapped> auto_wrap(torch::nn::Module& root, int64_t min_num_params);

// Puts the entry back as it was before auto_wrap.
void unwrap(const AutoWrapped& wrapped);

}  // namespace volt::fsdp

#pragma once
// An optimizer's state in PyTorch's layout, so that torch.optim.<Same>(params).load_state_dict()
// reads what volt wrote (and volt resumes bit for bit from it):
//   {"state":        {index: {"step": tensor(float64), "exp_avg": tensor, ...}},
//    "param_groups": [{"lr": ..., "betas": (b1, b2), ..., "params": [index, ...]}],
//    "volt_optimizer": "Adam"}
// Parameters are numbered 0, 1, ... across the groups in order; a parameter without state (not
// stepped yet) has no entry. SGD, Adam, AdamW, RMSprop, Adagrad and any optimizer with a
// registered OptimizerStateCodec (optimizer_state_codec.h) are stored this way; any other
// optimizer as LibTorch's own serialization (bytes under "libtorch_archive"), which volt restores
// but Python cannot read.
#include <torch/torch.h>

#include <functional>
#include <optional>
#include <string>

#include "core/state_dict.h"

namespace volt {

StateDict optimizer_state_dict(const torch::optim::Optimizer& optimizer);

// Names a parameter in error messages (e.g. by the module's parameter names); may be empty.
using ParameterNamer = std::function<std::string(const torch::Tensor&)>;

// Names each of `module`'s parameters by its name in the module (named_parameters()); "" for a
// tensor that is not one of them. The names are taken now.
ParameterNamer parameter_namer(const torch::nn::Module& module);

// Replaces the optimizer's state and its groups' options (lr, betas, ...) with `state`, moving
// tensors to each parameter's device and dtype. Throws CheckpointError when the optimizer type,
// the number of groups or of parameters per group, or a state tensor's shape does not match.
// `what` names the optimizer in messages (e.g. "optimizer 0"). `take_tensors`: `state`'s tensors
// are the caller's own and unused after, so the optimizer may keep them instead of copies.
void load_optimizer_state_dict(torch::optim::Optimizer& optimizer, const StateDict& state,
                               const std::string& what, const ParameterNamer& name_of = {},
                               bool take_tensors = false);

// The entry of parameter `index` in such a layout's "state" (keys are ints as volt writes them;
// strings are accepted too, as other tools may leave them); none when it has no state.
std::optional<c10::impl::GenericDict> optimizer_state_at(const c10::impl::GenericDict& states, int64_t index);
// A param group's options (lr, betas, ...): the group without its "params". `what` names it in errors.
StateDict param_group_options(const c10::IValue& group, const std::string& what);

}  // namespace volt

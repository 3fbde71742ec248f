// CheckpointState's defaults: whole tensors on every rank, optimizer state consolidated when the
// strategy shards it, and per-rank gradients of an open window gathered for global rank 0.
#include "strategies/checkpoint_state.h"

#include "checkpoint/module_state.h"
#include "checkpoint/per_rank_entries.h"
#include "checkpoint/sharded_checkpoint.h"
#include "core/error.h"
#include "core/warning.h"
#include "strategies/optimizer_sharding.h"
#include "strategies/rank_gather.h"
#include "strategies/sharded_optimizer.h"
#include "strategies/part_context.h"
#include "strategies/strategy_collectives.h"

namespace volt {

StateDict CheckpointState::model_state_dict(torch::nn::Module& module, CheckpointLayout layout) {
  return module_state_dict(module);
}

void CheckpointState::load_model_state_dict(torch::nn::Module& module, const StateDict& state, CheckpointLayout layout,
                                            bool strict, const std::string& source, const ShardedCheckpoint* slices) {
  load_module_state_dict(module, state, strict, source);
}

StateDict CheckpointState::optimizer_state_dict(torch::optim::Optimizer& optimizer, CheckpointLayout layout) {
  // A sharded optimizer consolidates its shards (Full) or writes its own (Sharded).
  if (const auto* sharding = context().optimizer_sharding()) return sharding->state_dict(optimizer, layout);
  return volt::optimizer_state_dict(optimizer);
}

void CheckpointState::load_optimizer_state_dict(torch::optim::Optimizer& optimizer, const StateDict& state,
                                                CheckpointLayout layout, const std::string& what,
                                                const ParameterNamer& name_of, const ShardedCheckpoint* slices) {
  if (const auto* sharding = context().optimizer_sharding())
    return sharding->load_state_dict(optimizer, state, what, name_of);
  volt::load_optimizer_state_dict(optimizer, state, what, name_of);
}

StateDict CheckpointState::shard_index(const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers) {
  std::vector<OptimizerShardIndex> layouts(optimizers.size());
  for (auto& layout : layouts) layout.kind = (context().optimizer_sharding() != nullptr) ? "partitioned" : "replicated";
  return volt::shard_index({}, layouts);
}

StateDict CheckpointState::accumulated_gradients(torch::nn::Module& module, CheckpointLayout layout) {
  StateDict section;
  const auto parameters = module.named_parameters();
  const auto topology = context().topology();
  if (topology.world_size == 1 || layout == CheckpointLayout::Sharded) {
    StateDict grads;
    for (const auto& p : parameters) {
      if (p.value().grad().defined()) grads.set(p.key(), p.value().grad());
    }
    section.set("accumulated_grads", grads);
    return section;
  }
  // Each rank's own gradients, for global rank 0 to write. Which parameters have one is gathered
  // first, so that every rank takes part in the same gathers.
  auto has_grad = torch::zeros({static_cast<int64_t>(parameters.size())}, torch::kInt32);
  for (size_t i = 0; i < parameters.size(); ++i) {
    has_grad[static_cast<int64_t>(i)] = parameters[i].value().grad().defined() ? 1 : 0;
  }
  const auto flags = gather_from_ranks(context().collectives(), has_grad);
  std::vector<StateDict> per_rank(flags.size());
  for (size_t i = 0; i < parameters.size(); ++i) {
    const auto index = static_cast<int64_t>(i);
    bool anywhere = false;
    for (const auto& f : flags) anywhere |= f[index].item<int32_t>() != 0;
    if (!anywhere) continue;
    const auto& parameter = parameters[i].value();
    const auto grad = parameter.grad().defined()
                          ? parameter.grad()
                          : torch::zeros(held_gradient_shape(parameters[i].key(), parameter), parameter.options());
    const auto all = gather_from_ranks(context().collectives(), grad);
    for (size_t r = 0; r < per_rank.size(); ++r) {
      if (flags[r][index].item<int32_t>() != 0) per_rank[r].set(parameters[i].key(), all[r]);
    }
  }
  section.set("accumulated_grads_per_rank", state_dict_list(per_rank));
  return section;
}

void CheckpointState::load_accumulated_gradients(torch::nn::Module& module, const StateDict& section,
                                                       const std::string& source) {
  StateDict grads = section.contains("accumulated_grads") ? section.child("accumulated_grads") : StateDict();
  if (section.contains("accumulated_grads_per_rank")) {
    const auto topology = context().topology();
    auto found =
        per_rank_entry(section, "accumulated_grads_per_rank", topology.global_rank, topology.world_size, source);
    if (found.entry) {
      grads = std::move(*found.entry);
    } else if ((context().topology().global_rank == 0)) {
      warn(source + " was written inside an accumulation window by " + std::to_string(found.saved_ranks) +
           " ranks, this run has " + std::to_string(topology.world_size) +
           ": the window's gradients so far are dropped, so its step averages fewer micro-batches");
    }
  }
  torch::NoGradGuard no_grad;
  for (auto& p : module.named_parameters()) {
    auto& parameter = p.value();
    if (grads.contains(p.key())) {
      const auto grad = grads.get_tensor(p.key());
      const auto shape = held_gradient_shape(p.key(), parameter);
      check<CheckpointError>(grad.sizes() == c10::IntArrayRef(shape), source, ": the accumulated gradient of ", p.key(),
                             " has shape ", grad.sizes(), ", the parameter ", c10::IntArrayRef(shape));
      parameter.mutable_grad() = grad.to(parameter.options(), /*non_blocking=*/false, /*copy=*/true);
    } else if (parameter.grad().defined()) {
      parameter.mutable_grad().reset();
    }
  }
}

}  // namespace volt

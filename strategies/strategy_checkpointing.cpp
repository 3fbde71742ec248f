// StrategyCheckpointing's defaults: whole tensors on every rank, the Full layout written by global
// rank 0, per-rank gradients of an open window gathered for it, and the directory mechanics of the
// Sharded layout (Note [Checkpoint layouts]).
#include <fcntl.h>
#include <stdio.h>

#include <cerrno>
#include <cstring>
#include <exception>

#include "strategies/strategy_checkpointing.h"
#include "checkpoint/atomic_file.h"
#include "checkpoint/module_state.h"
#include "checkpoint/per_rank_entries.h"
#include "core/error.h"
#include "core/warning.h"
#include "strategies/rank_gather.h"
#include "strategies/sharded_optimizer.h"

namespace fs = std::filesystem;

namespace volt {
namespace {

fs::path shard_file(const fs::path& directory, int64_t rank) {
  return directory / ("shard_" + std::to_string(rank) + ".ckpt");
}

// Runs `body` where `run_here` holds; then every rank learns whether it succeeded (the decision is
// a collective, so it is also the barrier after the write). A failure is rethrown where it
// happened and reported as a CheckpointError on the other ranks.
void run_and_agree(StrategyCollectives& strategy, bool run_here, bool all_ranks_ran, const std::string& what,
                   const std::function<void()>& body, std::source_location site = std::source_location::current()) {
  std::exception_ptr failure;
  if (run_here) {
    try {
      body();
    } catch (...) {
      failure = std::current_exception();
    }
  }
  // The caller's line names the agreement (Note [Which decision]): a save and a removal differ.
  const bool ok = all_ranks_ran ? strategy.reduce_boolean_decision(failure == nullptr, /*all=*/true, site)
                                : strategy.broadcast_decision(failure == nullptr, site);
  if (failure) std::rethrow_exception(failure);
  const auto topology = strategy.topology();
  check<CheckpointError>(ok, what, " failed on ", all_ranks_ran ? "another rank" : "global rank 0",
                         " (this is rank ", topology.global_rank, " of ", topology.world_size,
                         "); see that rank's error");
}

// Moves the complete directory `temporary` to `path` in one step, also when `path` exists (the
// two are exchanged, then the old one removed), so that a reader never sees a partial directory.
void replace_directory(const fs::path& temporary, const fs::path& path) {
  checkpoint_test_kill_point();
  if (::renameat2(AT_FDCWD, temporary.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) != 0) {
    check<CheckpointError>(errno == EEXIST, "checkpoint: cannot rename '", temporary.string(), "' to '",
                           path.string(), "': ", std::strerror(errno));
    check<CheckpointError>(::renameat2(AT_FDCWD, temporary.c_str(), AT_FDCWD, path.c_str(), RENAME_EXCHANGE) == 0,
                           "checkpoint: cannot replace '", path.string(), "' with '", temporary.string(), "': ",
                           std::strerror(errno));
    std::error_code ignored;
    fs::remove_all(temporary, ignored);  // the previous checkpoint, now under the temporary name
  }
  sync_directory(path.parent_path().empty() ? fs::path(".") : path.parent_path());
}

}  // namespace

void StrategyCheckpointing::set_checkpoint_io(std::shared_ptr<CheckpointIO> checkpoint_io) {
  check<ConfigurationError>(checkpoint_io != nullptr, "StrategyCheckpointing::set_checkpoint_io: expected a CheckpointIO, got nullptr");
  checkpoint_io_ = std::move(checkpoint_io);
}

StateDict StrategyCheckpointing::model_state_dict(torch::nn::Module& module, CheckpointLayout layout) { return module_state_dict(module); }

void StrategyCheckpointing::load_model_state_dict(torch::nn::Module& module, const StateDict& state, CheckpointLayout layout, bool strict,
                                     const std::string& source) {
  load_module_state_dict(module, state, strict, source);
}

StateDict StrategyCheckpointing::optimizer_state_dict(torch::optim::Optimizer& optimizer, CheckpointLayout layout) {
  // A sharded optimizer consolidates its shards (Full) or writes its own (Sharded).
  if (auto* sharded = dynamic_cast<ShardedOptimizer*>(&optimizer)) {
    return layout == CheckpointLayout::Full ? sharded->consolidated_state_dict(0) : sharded->shard_state_dict();
  }
  return volt::optimizer_state_dict(optimizer);
}

void StrategyCheckpointing::load_optimizer_state_dict(torch::optim::Optimizer& optimizer, const StateDict& state,
                                         CheckpointLayout layout, const std::string& what,
                                         const ParameterNamer& name_of) {
  if (auto* sharded = dynamic_cast<ShardedOptimizer*>(&optimizer)) {
    return sharded->load_sharded_or_consolidated_state_dict(state, what, name_of);
  }
  volt::load_optimizer_state_dict(optimizer, state, what, name_of);
}

StateDict StrategyCheckpointing::accumulated_gradients(torch::nn::Module& module, CheckpointLayout layout) {
  StateDict section;
  const auto parameters = module.named_parameters();
  const auto topology = this->topology();
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
  const auto flags = gather_from_ranks(*this, has_grad);
  std::vector<StateDict> per_rank(flags.size());
  for (size_t i = 0; i < parameters.size(); ++i) {
    const auto index = static_cast<int64_t>(i);
    bool anywhere = false;
    for (const auto& f : flags) anywhere |= f[index].item<int32_t>() != 0;
    if (!anywhere) continue;
    const auto& parameter = parameters[i].value();
    const auto grad = parameter.grad().defined() ? parameter.grad() : torch::zeros_like(parameter);
    const auto all = gather_from_ranks(*this, grad);
    for (size_t r = 0; r < per_rank.size(); ++r) {
      if (flags[r][index].item<int32_t>() != 0) per_rank[r].set(parameters[i].key(), all[r]);
    }
  }
  section.set("accumulated_grads_per_rank", state_dict_list(per_rank));
  return section;
}

void StrategyCheckpointing::load_accumulated_gradients(torch::nn::Module& module, const StateDict& section,
                                                       const std::string& source) {
  StateDict grads = section.contains("accumulated_grads") ? section.child("accumulated_grads") : StateDict();
  if (section.contains("accumulated_grads_per_rank")) {
    const auto topology = this->topology();
    auto found = per_rank_entry(section, "accumulated_grads_per_rank", topology.global_rank, topology.world_size, source);
    if (found.entry) {
      grads = std::move(*found.entry);
    } else if (is_global_zero()) {
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
      check<CheckpointError>(grad.sizes() == parameter.sizes(), source, ": the accumulated gradient of ", p.key(),
                             " has shape ", grad.sizes(), ", the parameter ", parameter.sizes());
      parameter.mutable_grad() = grad.to(parameter.options(), /*non_blocking=*/false, /*copy=*/true);
    } else if (parameter.grad().defined()) {
      parameter.mutable_grad().reset();
    }
  }
}

void StrategyCheckpointing::save_checkpoint(const StateDict& checkpoint, const fs::path& path) {
  const auto topology = this->topology();
  if (checkpoint_layout() == CheckpointLayout::Full) {
    run_and_agree(*this, topology.global_rank == 0, false, "writing checkpoint '" + path.string() + "'",
                  [&] { checkpoint_io().save(checkpoint, path); });
    return;
  }
  check<CheckpointError>(!path.filename().empty(), "checkpoint: expected a path to name a sharded checkpoint, got '",
                         path.string(), "'");
  std::string hidden(1, '.');  // built by appending: GCC 12 warns falsely on "." + std::string
  hidden += path.filename().string();
  hidden += ".tmp";
  const fs::path temporary = path.parent_path() / hidden;
  run_and_agree(*this, topology.global_rank == 0, false, "preparing '" + temporary.string() + "'", [&] {
    std::error_code error;
    fs::remove_all(temporary, error);  // left behind by a writer that was killed
    fs::create_directories(temporary, error);
    check<CheckpointError>(!error, "checkpoint: cannot create '", temporary.string(), "': ", error.message());
  });
  run_and_agree(*this, true, true, "writing shard " + std::to_string(topology.global_rank) + " of '" + path.string() + "'",
                [&] { checkpoint_io().save(checkpoint, shard_file(temporary, topology.global_rank)); });
  run_and_agree(*this, topology.global_rank == 0, false, "renaming '" + temporary.string() + "'",
                [&] { replace_directory(temporary, path); });
}

StateDict StrategyCheckpointing::load_checkpoint(const fs::path& path) {
  std::error_code error;
  if (!fs::is_directory(path, error)) return checkpoint_io().load(path);
  const auto topology = this->topology();
  const fs::path shard = shard_file(path, topology.global_rank);
  check<CheckpointError>(fs::exists(shard, error), "checkpoint: '", path.string(),
                         "' is a directory without a shard for global rank ", topology.global_rank, " (",
                         shard.filename().string(), "); it is not a sharded checkpoint, or was written by fewer than ",
                         topology.world_size, " ranks");
  return checkpoint_io().load(shard);
}

void StrategyCheckpointing::remove_checkpoint(const fs::path& path) {
  run_and_agree(*this, is_global_zero(), false, "removing checkpoint '" + path.string() + "'",
                [&] { checkpoint_io().remove(path); });
}

}  // namespace volt

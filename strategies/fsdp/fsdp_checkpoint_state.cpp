#include "strategies/fsdp/fsdp_checkpoint_state.h"

#include <map>
#include <set>

#include "checkpoint/module_state.h"
#include "checkpoint/sharded_checkpoint.h"
#include "core/error.h"
#include "strategies/fsdp/flat_slice.h"
#include "strategies/part_context.h"

namespace volt {

FSDPCheckpointState::FSDPCheckpointState(const PartContext& context, CheckpointLayout layout,
                                         std::shared_ptr<fsdp::FSDPState> state)
    : CheckpointState(context, layout), state_(std::move(state)) {}

namespace {

// What a unit writes to a Sharded checkpoint: a flat tensor of the index's (this rank's slice of
// it, under `key`). The flat layout writes one, its flat shard ("<unit>.flat_shard", the root's
// "flat_shard"); the per-parameter layout one per parameter ("<name>.flat_shard"): a parameter cut
// on its first dimension is a flat tensor of one entry cut into equal slices (Note [Per-parameter
// layout]), so the index that puts flat shards together anywhere reads it as it is, and each rank
// writes and reads its own shards with no collective.
struct SavedShard {
  FlatShardIndex index;
  torch::Tensor tensor;     // this rank's slice (the flat shard, or the parameter's shard)
  std::vector<size_t> entries;  // the unit's entries it holds, in index order
};

std::vector<SavedShard> saved_shards(const fsdp::FullyShardedUnit& unit, int64_t rank) {
  const auto& flat = unit.flat();
  std::vector<SavedShard> out;
  if (flat.empty()) return out;  // a unit whose parameters all went to its children
  if (flat.layout() == fsdp::ShardLayout::Flat) {
    SavedShard saved{{unit.settings().is_root ? std::string("flat_shard") : unit.name() + ".flat_shard", flat.numel(),
                      flat.shard_offset(), flat.shard_numel(), {}, {}, {}},
                     flat.shard(),
                     {}};
    for (size_t e = 0; e < flat.entries().size(); ++e) {
      const auto& entry = flat.entries()[e];
      saved.index.names.push_back(entry.name);
      saved.index.shapes.push_back(entry.shape);
      saved.index.offsets.push_back(entry.offset);
      saved.entries.push_back(e);
    }
    out.push_back(std::move(saved));
    return out;
  }
  for (size_t e = 0; e < flat.entries().size(); ++e) {
    const auto& entry = flat.entries()[e];
    const int64_t numel = entry.chunk.chunk_numel();
    out.push_back({{entry.name + ".flat_shard", entry.numel(), rank * numel, numel, {entry.name}, {entry.shape}, {0}},
                   entry.shard,
                   {e}});
  }
  return out;
}

}  // namespace

StateDict FSDPCheckpointState::model_state_dict(torch::nn::Module& module, CheckpointLayout layout) {
  StateDict state = module_state_dict(module);  // the units' parameters read as released (empty)
  if (layout == CheckpointLayout::Sharded) {
    for (const auto& unit : state_->units()) {
      for (const auto& entry : unit->flat().entries()) state.erase(entry.name);
      // A shard of another dtype than its block (a unit of mixed dtypes keeps bytes) is written as a
      // copy: a file stores each storage once, in one dtype, and these would share the block's.
      const bool bytes = unit->flat().shard().scalar_type() == torch::kByte;
      for (const auto& saved : saved_shards(*unit, unit->flat().shard_rank()))
        state.set(saved.index.key, bytes ? saved.tensor.detach().clone() : saved.tensor.detach());
    }
    return state;
  }
  // Note [A full save gathers to rank 0]: a Full checkpoint is written by global rank 0 alone, so
  // only rank 0 needs the whole model (PyTorch FSDP's FullStateDictConfig(rank0_only=True)). Each
  // unit's shards are gathered to it, one unit at a time, and moved to the host there (a unit at a
  // time on the device too); the other ranks hold nothing more than their shards during the save.
  // The optimizer's per-element state is gathered the same way (consolidate_optimizer_state).
  const int64_t root = 0;
  const bool is_root = context().topology().global_rank == root;
  for (const auto& unit : state_->units()) {
    if (unit->flat().empty()) continue;  // a unit whose parameters all went to its children
    const auto values = unit->flat().parameters_gathered_to(root);
    if (!is_root) continue;
    const auto& entries = unit->flat().entries();
    for (size_t i = 0; i < entries.size(); ++i) state.set(entries[i].name, values[i].to(torch::kCPU));
  }
  return state;
}

StateDict FSDPCheckpointState::full_model_state_dict(torch::nn::Module& module) {
  StateDict state = module_state_dict(module);
  // Every rank gathers every unit; the values replace the released ones under their names, in
  // module order.
  for (const auto& unit : state_->units()) {
    if (unit->flat().empty()) continue;
    const auto values = unit->flat().full_parameters();
    const auto& entries = unit->flat().entries();
    for (size_t i = 0; i < entries.size(); ++i) state.set(entries[i].name, values[i]);
  }
  return state;
}

void FSDPCheckpointState::load_model_state_dict(torch::nn::Module& module, const StateDict& state,
                                                CheckpointLayout layout, bool strict, const std::string& source,
                                                const ShardedCheckpoint* slices) {
  StateDict rest = state;
  for (const auto& unit : state_->units()) {
    auto& flat = unit->flat();
    if (flat.empty()) continue;
    if (layout == CheckpointLayout::Sharded) {
      for (const auto& saved : saved_shards(*unit, flat.shard_rank())) {
        const auto& key = saved.index.key;
        check<CheckpointError>(state.contains(key), source, ": no '", key, "' (a shard of ", unit->describe(),
                               "); a sharded fsdp checkpoint resumes with the same model and world size only");
        const auto shard = state.get_tensor(key);
        check<CheckpointError>(shard.numel() == saved.tensor.numel(), source, ": '", key, "' has ", shard.numel(),
                               " elements, this rank's shard ", saved.tensor.numel(),
                               "; it was written with another model or world size");
        torch::NoGradGuard no_grad;
        saved.tensor.view({-1}).copy_(shard.reshape({-1}));
        rest.erase(key);
      }
      continue;
    }
    // Only this rank's slice of each parameter (Note [Loading a slice]).
    std::vector<torch::Tensor> values;
    for (const auto& entry : flat.entries()) {
      check<CheckpointError>(state.contains(entry.name), source, ": no '", entry.name, "' (a parameter of ",
                             unit->describe(), ")");
      const auto value = state.get_tensor(entry.name);
      check<CheckpointError>(value.sizes().vec() == entry.shape, source, ": '", entry.name, "' has shape ",
                             value.sizes(), ", the model's is ", c10::IntArrayRef(entry.shape));
      values.push_back(value);
      rest.erase(entry.name);
    }
    if (flat.layout() == fsdp::ShardLayout::Flat) {
      fsdp::read_flat_slice_into(flat, values, slices, flat.shard());
      continue;
    }
    torch::NoGradGuard no_grad;
    for (size_t e = 0; e < values.size(); ++e) {
      const auto& shard = flat.stepped(e);  // each parameter's rows, in its own dtype
      shard.copy_(fsdp::read_stepped_slice(flat, e, values, slices, shard.scalar_type()));
    }
  }
  if (slices != nullptr) rest = slices->materialize(rest);  // buffers and parameters outside the units
  // Buffers and parameters outside the units; the units' parameters (released) are checked above.
  auto mismatch = compare_state_dict(module, rest);
  std::set<std::string> sharded_names;
  for (const auto& unit : state_->units()) {
    for (const auto& entry : unit->flat().entries()) sharded_names.insert(entry.name);
  }
  std::erase_if(mismatch.missing, [&](const std::string& name) { return sharded_names.count(name) > 0; });
  check<CheckpointError>(!strict || (mismatch.missing.empty() && mismatch.unexpected.empty()), source,
                         ": the checkpoint does not fit the model:\n", mismatch.describe());
  load_module_state_dict(module, rest, /*strict=*/false, source);
}

StateDict FSDPCheckpointState::optimizer_state_dict(torch::optim::Optimizer& optimizer, CheckpointLayout layout) {
  auto it = state_->layouts().find(&optimizer);
  if (layout == CheckpointLayout::Sharded || it == state_->layouts().end()) {
    return CheckpointState::optimizer_state_dict(optimizer, layout);
  }
  return fsdp::consolidate_optimizer_state(optimizer, it->second, /*root=*/0);
}

void FSDPCheckpointState::load_optimizer_state_dict(torch::optim::Optimizer& optimizer, const StateDict& state,
                                                    CheckpointLayout layout, const std::string& what,
                                                    const ParameterNamer& name_of, const ShardedCheckpoint* slices) {
  auto it = state_->layouts().find(&optimizer);
  if (layout == CheckpointLayout::Sharded || it == state_->layouts().end()) {
    return CheckpointState::load_optimizer_state_dict(optimizer, state, layout, what, name_of, slices);
  }
  fsdp::load_consolidated_optimizer_state(optimizer, it->second, state, what, slices);
}

std::vector<int64_t> FSDPCheckpointState::held_gradient_shape(const std::string& name,
                                                               const torch::Tensor& parameter) const {
  if (const auto* entry = state_->entry_named(name)) return entry->shape;
  return CheckpointState::held_gradient_shape(name, parameter);
}

bool FSDPCheckpointState::is_own_layout(const StateDict& shard) const {
  if (!shard.contains("shard_index")) return false;
  const auto saved = shard.child("shard_index").at("flat_parameters").toListRef();
  size_t i = 0;
  for (const auto& unit : state_->units()) {
    for (const auto& own : saved_shards(*unit, unit->flat().shard_rank())) {
      if (i >= saved.size()) return false;
      const auto index = FlatShardIndex::from_state_dict(StateDict::from_ivalue(saved[i++], "shard_index"));
      if (index.key != own.index.key || index.numel != own.index.numel ||
          index.shard_offset != own.index.shard_offset || index.shard_numel != own.index.shard_numel ||
          index.names != own.index.names || index.shapes != own.index.shapes || index.offsets != own.index.offsets)
        return false;
    }
  }
  return i == saved.size();
}

StateDict FSDPCheckpointState::shard_index(const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers) {
  std::vector<FlatShardIndex> flats;
  // Each original parameter's flat key and entry in it, for the optimizers' layouts.
  std::map<std::pair<const fsdp::FlatParameter*, size_t>, std::pair<std::string, int64_t>> place;
  for (const auto& unit : state_->units()) {
    for (auto& saved : saved_shards(*unit, unit->flat().shard_rank())) {
      for (size_t i = 0; i < saved.entries.size(); ++i)
        place[{&unit->flat(), saved.entries[i]}] = {saved.index.key, static_cast<int64_t>(i)};
      flats.push_back(std::move(saved.index));
    }
  }
  std::vector<OptimizerShardIndex> layouts;
  for (const auto& optimizer : optimizers) {
    OptimizerShardIndex layout;
    const auto it = state_->layouts().find(optimizer.get());
    if (it != state_->layouts().end()) {
      layout.kind = "flat";
      for (const auto& group : it->second) {
        OptimizerShardIndex::Group g;
        for (const auto& p : group) {
          const auto where =
              p.flat != nullptr ? place.at({p.flat, p.entry}) : std::make_pair(std::string(), int64_t{0});
          g.flat.push_back(where.first);
          g.entry.push_back(p.flat != nullptr ? where.second : static_cast<int64_t>(p.entry));
          g.stepped.push_back(static_cast<int64_t>(p.stepped));
        }
        layout.groups.push_back(std::move(g));
      }
    }
    layouts.push_back(std::move(layout));
  }
  return volt::shard_index(flats, layouts);
}

}  // namespace volt

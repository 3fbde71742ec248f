#include "checkpoint/sharded_checkpoint.h"

#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <map>
#include <optional>

#include "checkpoint/optimizer_state.h"
#include "core/error.h"

namespace volt {
namespace fs = std::filesystem;

namespace {

using GenericDict = c10::impl::GenericDict;
using GenericList = c10::impl::GenericList;

// A new dict holding `state`'s entries (StateDicts share their storage).
StateDict shallow_copy(const StateDict& state) {
  StateDict copy;
  for (const auto& key : state.keys()) copy.set(key, state.at(key));
  return copy;
}

std::vector<int64_t> ints_of(const c10::IValue& value) {
  std::vector<int64_t> out;
  for (const auto& item : value.toListRef()) out.push_back(item.toInt());
  return out;
}

std::vector<std::string> strings_of(const c10::IValue& value) {
  std::vector<std::string> out;
  for (const auto& item : value.toListRef()) out.push_back(item.toStringRef());
  return out;
}

GenericList list_of(const std::vector<std::string>& values) {
  GenericList list(c10::AnyType::get());
  for (const auto& value : values) list.push_back(value);
  return list;
}

GenericList list_of(const std::vector<int64_t>& values) {
  GenericList list(c10::AnyType::get());
  for (const auto value : values) list.push_back(value);
  return list;
}

FlatShardIndex flat_from(const StateDict& state) {
  FlatShardIndex flat;
  flat.key = state.get_string("key");
  flat.numel = state.get_int("numel");
  flat.shard_offset = state.get_int("shard_offset");
  flat.shard_numel = state.get_int("shard_numel");
  flat.names = strings_of(state.at("names"));
  for (const auto& shape : state.at("shapes").toListRef()) flat.shapes.push_back(ints_of(shape));
  flat.offsets = ints_of(state.at("offsets"));
  check<CheckpointError>(flat.names.size() == flat.shapes.size() && flat.names.size() == flat.offsets.size(),
                         "shard index of '", flat.key, "': names, shapes and offsets differ in length");
  return flat;
}

OptimizerShardIndex optimizer_from(const StateDict& state) {
  OptimizerShardIndex optimizer;
  optimizer.kind = state.get_string("kind");
  for (const auto& group : state.at("groups").toListRef()) {
    const auto g = StateDict::from_ivalue(group, "shard index param group");
    optimizer.groups.push_back({strings_of(g.at("flat")), g.get_ints("entry"), g.get_ints("stepped")});
  }
  return optimizer;
}

struct Shard {
  const StateDict* checkpoint;
  std::string name;  // in messages
  std::map<std::string, FlatShardIndex> flats;
  std::vector<OptimizerShardIndex> optimizers;
};

// The flat tensor `key` put together from every shard's slice (`pick` takes a shard's slice),
// without its padding.
torch::Tensor join_flat(const std::vector<Shard>& shards, const std::string& key,
                        const std::function<torch::Tensor(const Shard&)>& pick) {
  const FlatShardIndex& first = shards.front().flats.at(key);
  std::vector<std::pair<const FlatShardIndex*, torch::Tensor>> slices;
  int64_t padded = first.numel;
  for (const auto& shard : shards) {
    const auto it = shard.flats.find(key);
    check<CheckpointError>(it != shard.flats.end(), shard.name, ": its index has no flat tensor '", key,
                           "', which ", shards.front().name, " has: the shards are from different models");
    const auto& index = it->second;
    check<CheckpointError>(index.numel == first.numel, shard.name, ": '", key, "' has ", index.numel,
                           " values in all, ", shards.front().name, " says ", first.numel,
                           ": the shards are from different models");
    auto slice = pick(shard).reshape({-1});
    check<CheckpointError>(slice.numel() == index.shard_numel, shard.name, ": '", key, "' holds ", slice.numel(),
                           " values, its index says ", index.shard_numel, ": the file is damaged");
    padded = std::max(padded, index.shard_offset + index.shard_numel);
    slices.emplace_back(&index, std::move(slice));
  }
  // Replicas of a slice (NO_SHARD) write the same values to the same place.
  auto flat = torch::zeros({padded}, slices.front().second.options());
  for (const auto& [index, slice] : slices) flat.narrow(0, index->shard_offset, index->shard_numel).copy_(slice);
  return flat.narrow(0, 0, first.numel);
}

torch::Tensor entry_of(const torch::Tensor& flat, const FlatShardIndex& index, size_t i) {
  int64_t numel = 1;
  for (const auto d : index.shapes[i]) numel *= d;
  return flat.narrow(0, index.offsets[i], numel).view(index.shapes[i]).clone();
}

StateDict assemble_model(const std::vector<Shard>& shards) {
  const StateDict first = shards.front().checkpoint->child("state_dict");
  StateDict out;
  for (const auto& key : first.keys()) {
    const auto flat = shards.front().flats.find(key);
    if (flat == shards.front().flats.end()) {
      out.set(key, first.at(key));
      continue;
    }
    const auto joined = join_flat(shards, key, [&](const Shard& shard) {
      const auto state = shard.checkpoint->child("state_dict");
      check<CheckpointError>(state.contains(key), shard.name, ": no '", key, "' in its state_dict, which its index lists");
      return state.get_tensor(key);
    });
    for (size_t i = 0; i < flat->second.names.size(); ++i) out.set(flat->second.names[i], entry_of(joined, flat->second, i));
  }
  return out;
}

StateDict optimizer_of(const Shard& shard, size_t i) {
  const auto& list = shard.checkpoint->at("optimizer_states").toListRef();
  check<CheckpointError>(i < list.size(), shard.name, ": holds ", list.size(), " optimizers' states, the first shard ",
                         "more: the shards are from different saves");
  return StateDict::from_ivalue(list[i], shard.name + " optimizer " + std::to_string(i));
}

StateDict assemble_flat_optimizer(const std::vector<Shard>& shards, size_t i) {
  const auto& layout = shards.front().optimizers[i];
  std::vector<StateDict> states;
  for (const auto& shard : shards) states.push_back(optimizer_of(shard, i));
  const auto groups = states.front().at("param_groups").toListRef();
  check<CheckpointError>(groups.size() == layout.groups.size(), shards.front().name, ": optimizer ", i, " has ",
                         groups.size(), " param groups, its index ", layout.groups.size());
  GenericDict out_states(c10::IntType::get(), c10::AnyType::get());
  GenericList out_groups(c10::AnyType::get());
  int64_t original = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& group = layout.groups[g];
    // Each shard's stepped tensors' indices in its "state".
    std::vector<std::vector<int64_t>> params;
    for (const auto& state : states) params.push_back(StateDict::from_ivalue(state.at("param_groups").toListRef()[g]).get_ints("params"));
    // A stepped tensor's state in shard r.
    const auto stepped_state = [&](size_t r, int64_t stepped) {
      check<CheckpointError>(stepped >= 0 && stepped < static_cast<int64_t>(params[r].size()), shards[r].name,
                             ": optimizer ", i, " param group ", g, " has no tensor ", stepped, ": the file is damaged");
      return optimizer_state_at(states[r].at("state").toGenericDict(), params[r][static_cast<size_t>(stepped)]);
    };
    // Each flat's per-element state, put together once for all of its parameters.
    std::map<std::pair<std::string, std::string>, torch::Tensor> joined;
    GenericList indices(c10::IntType::get());
    for (size_t p = 0; p < group.flat.size(); ++p) {
      const int64_t index = original++;
      indices.push_back(index);
      const auto first = stepped_state(0, group.stepped[p]);
      if (!first) continue;
      if (group.flat[p].empty()) {
        out_states.insert(index, *first);
        continue;
      }
      const auto& flat = shards.front().flats.at(group.flat[p]);
      GenericDict entry_state(c10::StringType::get(), c10::AnyType::get());
      for (const auto& item : *first) {
        const auto& key = item.key().toStringRef();
        const auto& value = item.value();
        // Per-element state (Adam's exp_avg) has the shard's size; the rest (Adam's step) is the
        // same on every rank and for every parameter of the flat: each its own copy.
        if (value.isTensor() && value.toTensor().dim() >= 1 && value.toTensor().numel() == flat.shard_numel) {
          auto& whole = joined[{group.flat[p], key}];
          if (!whole.defined()) {
            whole = join_flat(shards, group.flat[p], [&](const Shard& shard) {
              const size_t r = static_cast<size_t>(&shard - shards.data());
              const auto state = stepped_state(r, group.stepped[p]);
              check<CheckpointError>(state && state->contains(key), shard.name, ": optimizer ", i, " has no '", key,
                                     "' for '", group.flat[p], "', which ", shards.front().name, " has");
              return state->at(key).toTensor();
            });
          }
          entry_state.insert(key, entry_of(whole, flat, static_cast<size_t>(group.entry[p])));
        } else if (value.isTensor()) {
          entry_state.insert(key, value.toTensor().clone());
        } else {
          entry_state.insert(key, value);
        }
      }
      out_states.insert(index, entry_state);
    }
    auto options = param_group_options(groups[g], shards.front().name + " param group");
    options.set("params", indices);
    out_groups.push_back(options.to_ivalue());
  }
  StateDict full = shallow_copy(states.front());
  full.set("state", out_states);
  full.set("param_groups", out_groups);
  return full;
}

StateDict assemble_optimizer(const std::vector<Shard>& shards, size_t i) {
  const auto& kind = shards.front().optimizers[i].kind;
  if (kind == "flat") return assemble_flat_optimizer(shards, i);
  StateDict full = shallow_copy(optimizer_of(shards.front(), i));
  if (kind == "replicated") return full;
  check<CheckpointError>(kind == "partitioned", shards.front().name, ": optimizer ", i, " has the unknown layout '",
                         kind, "'; it was written by a newer volt");
  GenericDict merged(c10::IntType::get(), c10::AnyType::get());
  for (const auto& shard : shards) {
    for (const auto& entry : optimizer_of(shard, i).at("state").toGenericDict()) merged.insert_or_assign(entry.key(), entry.value());
  }
  full.set("state", merged);
  return full;
}

// What tells two saves apart: a shard of another save has another position.
std::string position_of(const StateDict& checkpoint) {
  std::string position;
  for (const char* key : {"epoch", "global_step"}) {
    if (checkpoint.contains(key)) position += std::string(position.empty() ? "" : ", ") + key + " " + std::to_string(checkpoint.get_int(key));
  }
  if (checkpoint.contains("loops")) {
    const auto fit_loop = checkpoint.child("loops").child("fit_loop");
    position += ", next_batch " + std::to_string(fit_loop.get_int("next_batch"));
  }
  return position;
}

}  // namespace

StateDict FlatShardIndex::to_state_dict() const {
  StateDict state;
  state.set("key", key);
  state.set("numel", numel);
  state.set("shard_offset", shard_offset);
  state.set("shard_numel", shard_numel);
  state.set("names", list_of(names));
  GenericList shape_list(c10::AnyType::get());
  for (const auto& shape : shapes) shape_list.push_back(list_of(shape));
  state.set("shapes", shape_list);
  state.set("offsets", list_of(offsets));
  return state;
}

StateDict OptimizerShardIndex::to_state_dict() const {
  StateDict state;
  state.set("kind", kind);
  GenericList group_list(c10::AnyType::get());
  for (const auto& group : groups) {
    StateDict g;
    g.set("flat", list_of(group.flat));
    g.set("entry", list_of(group.entry));
    g.set("stepped", list_of(group.stepped));
    group_list.push_back(g.to_ivalue());
  }
  state.set("groups", group_list);
  return state;
}

StateDict shard_index(const std::vector<FlatShardIndex>& flats, const std::vector<OptimizerShardIndex>& optimizers) {
  GenericList flat_list(c10::AnyType::get()), optimizer_list(c10::AnyType::get());
  for (const auto& flat : flats) flat_list.push_back(flat.to_state_dict().to_ivalue());
  for (const auto& optimizer : optimizers) optimizer_list.push_back(optimizer.to_state_dict().to_ivalue());
  StateDict index;
  index.set("flat_parameters", flat_list);
  index.set("optimizers", optimizer_list);
  return index;
}

fs::path shard_file(const fs::path& directory, int64_t rank) {
  return directory / ("shard_" + std::to_string(rank) + ".ckpt");
}

std::vector<StateDict> read_shards(CheckpointIO& io, const fs::path& directory) {
  std::error_code error;
  check<CheckpointError>(fs::is_directory(directory, error), "checkpoint: '", directory.string(),
                         "' is not a directory; a sharded checkpoint is a directory of shard_<rank>.ckpt files");
  const auto first_file = shard_file(directory, 0);
  check<CheckpointError>(fs::exists(first_file, error), "checkpoint: '", directory.string(),
                         "' has no shard_0.ckpt; it is not a sharded checkpoint, or its first shard is missing");
  std::vector<StateDict> shards{io.load(first_file)};
  const auto& first = shards.front();
  check<CheckpointError>(first.contains("shard"), first_file.string(), ": not a shard of a sharded checkpoint (no 'shard' entry)");
  const int64_t world = first.child("shard").get_int("world_size");
  int64_t files = 0;
  for (const auto& entry : fs::directory_iterator(directory)) {
    const auto name = entry.path().filename().string();
    if (name.rfind("shard_", 0) == 0 && entry.path().extension() == ".ckpt") ++files;
  }
  check<CheckpointError>(files == world, "checkpoint: '", directory.string(), "' holds ", files,
                         " shard files, its shards were written by ", world,
                         " ranks: shards of two saves are mixed in one directory, or one is missing");
  const std::string position = position_of(first);
  for (int64_t rank = 1; rank < world; ++rank) {
    const auto file = shard_file(directory, rank);
    check<CheckpointError>(fs::exists(file, error), "checkpoint: '", directory.string(), "' is missing ",
                           file.filename().string(), " of the ", world, " shards it was written with");
    shards.push_back(io.load(file));
    const auto& shard = shards.back();
    check<CheckpointError>(shard.contains("shard") && shard.child("shard").get_int("rank") == rank &&
                               shard.child("shard").get_int("world_size") == world,
                           file.string(), ": not the shard of rank ", rank, " of ", world);
    check<CheckpointError>(position_of(shard) == position, file.string(), " was written at ", position_of(shard),
                           ", ", first_file.filename().string(), " at ", position,
                           ": shards of two saves are mixed in one directory");
  }
  return shards;
}

StateDict assemble_full_checkpoint(const std::vector<StateDict>& checkpoints, const std::string& source,
                                   std::vector<std::string>* notes) {
  check<CheckpointError>(!checkpoints.empty(), source, ": no shards");
  std::vector<Shard> shards;
  for (size_t r = 0; r < checkpoints.size(); ++r) {
    Shard shard{&checkpoints[r], source + "/" + shard_file("", static_cast<int64_t>(r)).string(), {}, {}};
    check<CheckpointError>(checkpoints[r].contains("shard_index"), shard.name,
                           ": has no shard index (a Fabric checkpoint, or one of an older volt), so only the "
                           "strategy and world size that wrote it can load it; resume it with those");
    const auto index = checkpoints[r].child("shard_index");
    for (const auto& flat : index.at("flat_parameters").toListRef()) {
      auto parsed = flat_from(StateDict::from_ivalue(flat, shard.name + " shard index"));
      shard.flats.emplace(parsed.key, std::move(parsed));
    }
    for (const auto& optimizer : index.at("optimizers").toListRef()) {
      shard.optimizers.push_back(optimizer_from(StateDict::from_ivalue(optimizer, shard.name + " shard index")));
    }
    shards.push_back(std::move(shard));
  }
  const StateDict& first = checkpoints.front();
  StateDict full = shallow_copy(first);
  full.set("layout", std::string("full"));
  full.erase("shard");
  full.erase("shard_index");
  full.set("state_dict", assemble_model(shards));
  if (first.contains("optimizer_states")) {
    GenericList optimizers(c10::AnyType::get());
    const size_t count = first.at("optimizer_states").toListRef().size();
    check<CheckpointError>(shards.front().optimizers.size() == count, shards.front().name, ": its index describes ",
                           shards.front().optimizers.size(), " optimizers, it holds ", count);
    for (size_t i = 0; i < count; ++i) optimizers.push_back(assemble_optimizer(shards, i).to_ivalue());
    full.set("optimizer_states", optimizers);
  }
  if (first.contains("rng_states") && checkpoints.size() > 1) {
    GenericList per_rank(c10::AnyType::get());
    for (const auto& checkpoint : checkpoints) per_rank.push_back(checkpoint.at("rng_states"));
    full.set("rng_states_per_rank", per_rank);
  }
  auto strategy = shallow_copy(first.child("strategy"));
  if (strategy.contains("state") && !strategy.child("state").empty()) {
    if (notes) notes->push_back("the own state of strategy '" + strategy.get_string("name") + "' (kept per rank) starts afresh");
    strategy.erase("state");
  }
  full.set("strategy", strategy);
  if (first.contains("loops")) {
    auto fit_loop = shallow_copy(first.child("loops").child("fit_loop"));
    if (fit_loop.contains("accumulated_grads")) {
      if (shards.front().flats.empty()) {
        // Whole gradients on every rank: each rank's own, as a full checkpoint of several ranks holds them.
        GenericList per_rank(c10::AnyType::get());
        for (const auto& checkpoint : checkpoints) {
          per_rank.push_back(checkpoint.child("loops").child("fit_loop").at("accumulated_grads"));
        }
        fit_loop.set("accumulated_grads_per_rank", per_rank);
      } else if (notes) {
        notes->push_back("the gradients accumulated so far in the open accumulation window are dropped, so its step "
                         "averages fewer micro-batches");
      }
      fit_loop.erase("accumulated_grads");
    }
    auto loops = shallow_copy(first.child("loops"));
    loops.set("fit_loop", fit_loop);
    full.set("loops", loops);
  }
  return full;
}

}  // namespace volt

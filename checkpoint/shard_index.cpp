#include "checkpoint/shard_index.h"

#include <deque>

#include "core/error.h"

namespace volt {
namespace fs = std::filesystem;

namespace {

using GenericList = c10::impl::GenericList;

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

// What tells two saves apart: a shard of another save has another position.
std::string position_of(const StateDict& checkpoint) {
  std::string position;
  for (const char* key : {"epoch", "global_step"}) {
    if (checkpoint.contains(key))
      position += std::string(position.empty() ? "" : ", ") + key + " " + std::to_string(checkpoint.get_int(key));
  }
  if (checkpoint.contains("loops")) {
    const auto fit_loop = checkpoint.child("loops").child("fit_loop");
    position += ", next_batch " + std::to_string(fit_loop.get_int("next_batch"));
  }
  return position;
}

}  // namespace

// Note [A save's identity] in run/checkpoint_header.cpp.
int64_t save_id_of(const StateDict& shard) {
  const auto header = shard.child("shard");
  return header.contains("save_id") ? header.get_int("save_id") : -1;
}

FlatShardIndex FlatShardIndex::from_state_dict(const StateDict& state) {
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

OptimizerShardIndex OptimizerShardIndex::from_state_dict(const StateDict& state) {
  OptimizerShardIndex optimizer;
  optimizer.kind = state.get_string("kind");
  for (const auto& group : state.at("groups").toListRef()) {
    const auto g = StateDict::from_ivalue(group, "shard index param group");
    optimizer.groups.push_back({strings_of(g.at("flat")), g.get_ints("entry"), g.get_ints("stepped")});
  }
  return optimizer;
}

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

void load_shards(const fs::path& directory, const std::function<const StateDict&(const fs::path&)>& load) {
  std::error_code error;
  check<CheckpointError>(fs::is_directory(directory, error), "checkpoint: '", directory.string(),
                         "' is not a directory; a sharded checkpoint is a directory of shard_<rank>.ckpt files");
  const auto first_file = shard_file(directory, 0);
  check<CheckpointError>(fs::exists(first_file, error), "checkpoint: '", directory.string(),
                         "' has no shard_0.ckpt; it is not a sharded checkpoint, or its first shard is missing");
  const StateDict& first = load(first_file);
  check<CheckpointError>(first.contains("shard"), first_file.string(),
                         ": not a shard of a sharded checkpoint (no 'shard' entry)");
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
    const StateDict& shard = load(file);
    check<CheckpointError>(shard.contains("shard") && shard.child("shard").get_int("rank") == rank &&
                               shard.child("shard").get_int("world_size") == world,
                           file.string(), ": not the shard of rank ", rank, " of ", world);
    check<CheckpointError>(position_of(shard) == position, file.string(), " was written at ", position_of(shard),
                           ", ", first_file.filename().string(), " at ", position,
                           ": shards of two saves are mixed in one directory");
    check<CheckpointError>(save_id_of(shard) == save_id_of(first), file.string(), " belongs to save ",
                           save_id_of(shard), ", ", first_file.filename().string(), " to save ", save_id_of(first),
                           " (the same step, another run or another save): shards of two saves are mixed in one "
                           "directory");
  }
}

std::vector<StateDict> read_shards(CheckpointIO& io, const fs::path& directory) {
  std::deque<StateDict> shards;  // a deque: load_shards keeps references to earlier shards
  load_shards(directory, [&](const fs::path& file) -> const StateDict& {
    shards.push_back(io.load(file));
    return shards.back();
  });
  return {shards.begin(), shards.end()};
}

}  // namespace volt

#include "checkpoint/sharded_checkpoint.h"

#include <torch/torch.h>

#include <algorithm>
#include <deque>
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

namespace {

// Loads every shard of `directory` through `load` (which returns the shard's dict, kept by the
// caller), checking that they are one save's complete set.
void load_shards(const fs::path& directory, const std::function<const StateDict&(const fs::path&)>& load) {
  std::error_code error;
  check<CheckpointError>(fs::is_directory(directory, error), "checkpoint: '", directory.string(),
                         "' is not a directory; a sharded checkpoint is a directory of shard_<rank>.ckpt files");
  const auto first_file = shard_file(directory, 0);
  check<CheckpointError>(fs::exists(first_file, error), "checkpoint: '", directory.string(),
                         "' has no shard_0.ckpt; it is not a sharded checkpoint, or its first shard is missing");
  const StateDict& first = load(first_file);
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
    const StateDict& shard = load(file);
    check<CheckpointError>(shard.contains("shard") && shard.child("shard").get_int("rank") == rank &&
                               shard.child("shard").get_int("world_size") == world,
                           file.string(), ": not the shard of rank ", rank, " of ", world);
    check<CheckpointError>(position_of(shard) == position, file.string(), " was written at ", position_of(shard),
                           ", ", first_file.filename().string(), " at ", position,
                           ": shards of two saves are mixed in one directory");
  }
}

}  // namespace

std::vector<StateDict> read_shards(CheckpointIO& io, const fs::path& directory) {
  std::deque<StateDict> shards;  // a deque: load_shards keeps references to earlier shards
  load_shards(directory, [&](const fs::path& file) -> const StateDict& {
    shards.push_back(io.load(file));
    return shards.back();
  });
  return {shards.begin(), shards.end()};
}

namespace {

size_t element_size(const TensorPiece& piece) {
  return piece.in_file ? c10::elementSize(piece.in_file->dtype) : piece.values.element_size();
}

// Elements [begin, begin + count) of the runs `pieces`.
std::vector<TensorPiece> slice_pieces(const std::vector<TensorPiece>& pieces, int64_t begin, int64_t count) {
  std::vector<TensorPiece> out;
  int64_t at = 0;
  for (const auto& piece : pieces) {
    const int64_t lo = std::max(begin, at), hi = std::min(begin + count, at + piece.numel);
    if (lo < hi) {
      TensorPiece part{hi - lo, std::nullopt, {}};
      if (piece.in_file) {
        part.in_file = *piece.in_file;
        part.in_file->byte_offset += static_cast<uint64_t>(lo - at) * element_size(piece);
        part.in_file->numel = hi - lo;
      } else {
        part.values = piece.values.narrow(0, lo - at, hi - lo);
      }
      out.push_back(std::move(part));
    }
    at += piece.numel;
    if (at >= begin + count) break;
  }
  return out;
}

}  // namespace

// Puts a ShardedCheckpoint's full checkpoint together from its opened shards (the Note).
class ShardAssembly {
  struct Shard {
    const StateDict* checkpoint;
    std::string name;  // in messages
    std::map<std::string, FlatShardIndex> flats;
    std::vector<OptimizerShardIndex> optimizers;
  };

 public:
  ShardAssembly(ShardedCheckpoint& out, const std::string& source) : out_(out) {
    for (size_t r = 0; r < out.files_.size(); ++r) {
      const StateDict& checkpoint = out.files_[r].content;
      Shard shard{&checkpoint, source + "/" + shard_file("", static_cast<int64_t>(r)).string(), {}, {}};
      check<CheckpointError>(checkpoint.contains("shard_index"), shard.name,
                             ": has no shard index (a Fabric checkpoint, or one of an older volt), so only the "
                             "strategy and world size that wrote it can load it; resume it with those");
      const auto index = checkpoint.child("shard_index");
      for (const auto& flat : index.at("flat_parameters").toListRef()) {
        auto parsed = flat_from(StateDict::from_ivalue(flat, shard.name + " shard index"));
        shard.flats.emplace(parsed.key, std::move(parsed));
      }
      for (const auto& optimizer : index.at("optimizers").toListRef()) {
        shard.optimizers.push_back(optimizer_from(StateDict::from_ivalue(optimizer, shard.name + " shard index")));
      }
      shards_.push_back(std::move(shard));
    }
  }

  void run() {
    const StateDict& first = *shards_.front().checkpoint;
    StateDict full = shallow_copy(first);
    full.set("layout", std::string("full"));
    full.erase("shard");
    full.erase("shard_index");
    full.set("state_dict", model());
    if (first.contains("optimizer_states")) {
      GenericList optimizers(c10::AnyType::get());
      const size_t count = first.at("optimizer_states").toListRef().size();
      check<CheckpointError>(shards_.front().optimizers.size() == count, shards_.front().name, ": its index describes ",
                             shards_.front().optimizers.size(), " optimizers, it holds ", count);
      for (size_t i = 0; i < count; ++i) optimizers.push_back(optimizer(i).to_ivalue());
      full.set("optimizer_states", optimizers);
    }
    if (first.contains("rng_states") && shards_.size() > 1) {
      GenericList per_rank(c10::AnyType::get());
      for (const auto& shard : shards_) per_rank.push_back(shard.checkpoint->at("rng_states"));
      full.set("rng_states_per_rank", per_rank);
    }
    auto strategy = shallow_copy(first.child("strategy"));
    if (strategy.contains("state") && !strategy.child("state").empty()) {
      // Name what restarts: the section's entries (a comm hook's state, the averager's step, the
      // local models, SlowMo's buffers ...).
      std::string parts;
      for (const auto& key : strategy.child("state").keys()) parts += (parts.empty() ? "" : ", ") + key;
      out_.notes_.push_back("the own state of strategy '" + strategy.get_string("name") + "' (kept per rank: " + parts +
                            ") starts afresh");
      strategy.erase("state");
    }
    full.set("strategy", strategy);
    if (first.contains("loops")) {
      auto fit_loop = shallow_copy(first.child("loops").child("fit_loop"));
      if (fit_loop.contains("accumulated_grads")) {
        if (shards_.front().flats.empty()) {
          // Whole gradients on every rank: each rank's own, as a full checkpoint of several ranks holds them.
          GenericList per_rank(c10::AnyType::get());
          for (const auto& shard : shards_) {
            per_rank.push_back(shard.checkpoint->child("loops").child("fit_loop").at("accumulated_grads"));
          }
          fit_loop.set("accumulated_grads_per_rank", per_rank);
        } else {
          out_.notes_.push_back("the gradients accumulated so far in the open accumulation window are dropped, so "
                                "its step averages fewer micro-batches");
        }
        fit_loop.erase("accumulated_grads");
      }
      auto loops = shallow_copy(first.child("loops"));
      loops.set("fit_loop", fit_loop);
      full.set("loops", loops);
    }
    out_.full_ = full;
  }

 private:
  using Pieces = ShardedCheckpoint::Pieces;

  // A shard's tensor as pieces: a placeholder's runs in its file, or a real tensor's values.
  Pieces pieces_of(const torch::Tensor& tensor) const {
    if (out_.is_placeholder(tensor)) return out_.pieces_of(tensor);
    auto flat = tensor.detach().reshape({-1}).contiguous();
    return {tensor.sizes().vec(), tensor.scalar_type(), {TensorPiece{flat.numel(), std::nullopt, flat}}};
  }

  torch::Tensor placeholder(Pieces pieces) {
    auto tensor = torch::empty(pieces.shape, torch::TensorOptions().dtype(pieces.dtype).device(torch::kMeta));
    out_.placeholders_.emplace(tensor.unsafeGetTensorImpl(), std::move(pieces));
    out_.keep_alive_.push_back(tensor);
    return tensor;
  }

  // The flat tensor `key` put together from every shard's slice (`pick` takes a shard's slice),
  // without its padding.
  Pieces join_flat(const std::string& key, const std::function<torch::Tensor(const Shard&)>& pick) const {
    const FlatShardIndex& first = shards_.front().flats.at(key);
    std::vector<std::pair<const FlatShardIndex*, Pieces>> slices;
    for (const auto& shard : shards_) {
      const auto it = shard.flats.find(key);
      check<CheckpointError>(it != shard.flats.end(), shard.name, ": its index has no flat tensor '", key,
                             "', which ", shards_.front().name, " has: the shards are from different models");
      const auto& index = it->second;
      check<CheckpointError>(index.numel == first.numel, shard.name, ": '", key, "' has ", index.numel,
                             " values in all, ", shards_.front().name, " says ", first.numel,
                             ": the shards are from different models");
      auto slice = pieces_of(pick(shard));
      int64_t numel = 0;
      for (const auto& piece : slice.pieces) numel += piece.numel;
      check<CheckpointError>(numel == index.shard_numel, shard.name, ": '", key, "' holds ", numel,
                             " values, its index says ", index.shard_numel, ": the file is damaged");
      check<CheckpointError>(slices.empty() || slice.dtype == slices.front().second.dtype, shard.name, ": '", key,
                             "' is of another dtype than in ", shards_.front().name, ": the shards are from different runs");
      slices.emplace_back(&index, std::move(slice));
    }
    std::stable_sort(slices.begin(), slices.end(),
                     [](const auto& a, const auto& b) { return a.first->shard_offset < b.first->shard_offset; });
    Pieces flat{{first.numel}, slices.front().second.dtype, {}};
    // Replicas of a slice (NO_SHARD) hold the same values: the first one serves.
    int64_t covered = 0;
    for (const auto& [index, slice] : slices) {
      check<CheckpointError>(index->shard_offset <= covered, shards_.front().name, ": no shard holds values [", covered,
                             ", ", index->shard_offset, ") of '", key, "': the shards are from different runs");
      const int64_t end = std::min(index->shard_offset + index->shard_numel, first.numel);
      if (end <= covered) continue;
      for (auto& piece : slice_pieces(slice.pieces, covered - index->shard_offset, end - covered)) flat.pieces.push_back(std::move(piece));
      covered = end;
    }
    check<CheckpointError>(covered == first.numel, shards_.front().name, ": no shard holds values [", covered, ", ",
                           first.numel, ") of '", key, "': the shards are from different runs");
    return flat;
  }

  torch::Tensor entry_of(const Pieces& flat, const FlatShardIndex& index, size_t i) {
    int64_t numel = 1;
    for (const auto d : index.shapes[i]) numel *= d;
    return placeholder({index.shapes[i], flat.dtype, slice_pieces(flat.pieces, index.offsets[i], numel)});
  }

  StateDict model() {
    const StateDict first = shards_.front().checkpoint->child("state_dict");
    StateDict out;
    for (const auto& key : first.keys()) {
      const auto flat = shards_.front().flats.find(key);
      if (flat == shards_.front().flats.end()) {
        out.set(key, first.at(key));
        continue;
      }
      const auto joined = join_flat(key, [&](const Shard& shard) {
        const auto state = shard.checkpoint->child("state_dict");
        check<CheckpointError>(state.contains(key), shard.name, ": no '", key, "' in its state_dict, which its index lists");
        return state.get_tensor(key);
      });
      for (size_t i = 0; i < flat->second.names.size(); ++i) out.set(flat->second.names[i], entry_of(joined, flat->second, i));
    }
    return out;
  }

  StateDict optimizer_of(const Shard& shard, size_t i) const {
    const auto& list = shard.checkpoint->at("optimizer_states").toListRef();
    check<CheckpointError>(i < list.size(), shard.name, ": holds ", list.size(), " optimizers' states, the first shard ",
                           "more: the shards are from different saves");
    return StateDict::from_ivalue(list[i], shard.name + " optimizer " + std::to_string(i));
  }

  StateDict flat_optimizer(size_t i) {
    const auto& layout = shards_.front().optimizers[i];
    std::vector<StateDict> states;
    for (const auto& shard : shards_) states.push_back(optimizer_of(shard, i));
    const auto groups = states.front().at("param_groups").toListRef();
    check<CheckpointError>(groups.size() == layout.groups.size(), shards_.front().name, ": optimizer ", i, " has ",
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
        check<CheckpointError>(stepped >= 0 && stepped < static_cast<int64_t>(params[r].size()), shards_[r].name,
                               ": optimizer ", i, " param group ", g, " has no tensor ", stepped, ": the file is damaged");
        return optimizer_state_at(states[r].at("state").toGenericDict(), params[r][static_cast<size_t>(stepped)]);
      };
      // Each flat's per-element state, put together once for all of its parameters.
      std::map<std::pair<std::string, std::string>, Pieces> joined;
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
        const auto& flat = shards_.front().flats.at(group.flat[p]);
        GenericDict entry_state(c10::StringType::get(), c10::AnyType::get());
        for (const auto& item : *first) {
          const auto& key = item.key().toStringRef();
          const auto& value = item.value();
          // Per-element state (Adam's exp_avg) has the shard's size; the rest (Adam's step) is the
          // same on every rank and for every parameter of the flat: each its own copy.
          if (value.isTensor() && value.toTensor().dim() >= 1 && value.toTensor().numel() == flat.shard_numel) {
            auto found = joined.find({group.flat[p], key});
            if (found == joined.end()) {
              found = joined.emplace(std::make_pair(group.flat[p], key), join_flat(group.flat[p], [&](const Shard& shard) {
                const size_t r = static_cast<size_t>(&shard - shards_.data());
                const auto state = stepped_state(r, group.stepped[p]);
                check<CheckpointError>(state && state->contains(key), shard.name, ": optimizer ", i, " has no '", key,
                                       "' for '", group.flat[p], "', which ", shards_.front().name, " has");
                return state->at(key).toTensor();
              })).first;
            }
            entry_state.insert(key, entry_of(found->second, flat, static_cast<size_t>(group.entry[p])));
          } else if (value.isTensor()) {
            entry_state.insert(key, out_.materialize(value.toTensor()).clone());
          } else {
            entry_state.insert(key, value);
          }
        }
        out_states.insert(index, entry_state);
      }
      auto options = param_group_options(groups[g], shards_.front().name + " param group");
      options.set("params", indices);
      out_groups.push_back(options.to_ivalue());
    }
    StateDict full = shallow_copy(states.front());
    full.set("state", out_states);
    full.set("param_groups", out_groups);
    return full;
  }

  StateDict optimizer(size_t i) {
    const auto& kind = shards_.front().optimizers[i].kind;
    if (kind == "flat") return flat_optimizer(i);
    StateDict full = shallow_copy(optimizer_of(shards_.front(), i));
    if (kind == "replicated") return full;
    check<CheckpointError>(kind == "partitioned", shards_.front().name, ": optimizer ", i, " has the unknown layout '",
                           kind, "'; it was written by a newer volt");
    GenericDict merged(c10::IntType::get(), c10::AnyType::get());
    for (const auto& shard : shards_) {
      for (const auto& entry : optimizer_of(shard, i).at("state").toGenericDict()) merged.insert_or_assign(entry.key(), entry.value());
    }
    full.set("state", merged);
    return full;
  }

  ShardedCheckpoint& out_;
  std::vector<Shard> shards_;
};

ShardedCheckpoint::ShardedCheckpoint(CheckpointIO& io, const fs::path& directory) {
  std::deque<LazyCheckpoint> opened;  // a deque: load_shards keeps references to earlier shards
  load_shards(directory, [&](const fs::path& file) -> const StateDict& {
    opened.push_back(io.load_lazily(file, {"state_dict", "optimizer_states"}));
    return opened.back().content;
  });
  for (auto& file : opened) {
    for (const auto& [impl, where] : file.placeholders) {
      const auto* tensor = static_cast<const c10::TensorImpl*>(impl);
      placeholders_.emplace(impl, Pieces{tensor->sizes().vec(), where.dtype, {TensorPiece{where.numel, where, {}}}});
    }
    files_.push_back(std::move(file));
  }
  ShardAssembly(*this, directory.string()).run();
}

std::string ShardedCheckpoint::strategy() const { return files_.front().content.child("strategy").get_string("name"); }

bool ShardedCheckpoint::is_placeholder(const torch::Tensor& tensor) const {
  return tensor.defined() && tensor.is_meta() && placeholders_.count(tensor.unsafeGetTensorImpl()) > 0;
}

const ShardedCheckpoint::Pieces& ShardedCheckpoint::pieces_of(const torch::Tensor& placeholder) const {
  const auto found = placeholders_.find(placeholder.unsafeGetTensorImpl());
  VOLT_INTERNAL_ASSERT(found != placeholders_.end(), "a placeholder of this sharded checkpoint");
  return found->second;
}

void ShardedCheckpoint::read(const torch::Tensor& tensor, int64_t begin, torch::Tensor out) const {
  VOLT_INTERNAL_ASSERT(out.dim() == 1 && out.is_contiguous(), "read: into a 1-D contiguous tensor");
  check<CheckpointError>(begin >= 0 && begin + out.numel() <= tensor.numel(), "checkpoint: elements [", begin, ", ",
                         begin + out.numel(), ") of a tensor of ", tensor.numel());
  if (!is_placeholder(tensor)) {
    torch::NoGradGuard no_grad;
    out.copy_(tensor.detach().reshape({-1}).narrow(0, begin, out.numel()));
    return;
  }
  int64_t at = 0;
  for (const auto& piece : slice_pieces(pieces_of(tensor).pieces, begin, out.numel())) {
    auto target = out.narrow(0, at, piece.numel);
    at += piece.numel;
    if (!piece.in_file) {
      target.copy_(piece.values);
      continue;
    }
    const auto& where = *piece.in_file;
    const uint64_t bytes = static_cast<uint64_t>(piece.numel) * c10::elementSize(where.dtype);
    if (target.is_cpu() && target.scalar_type() == where.dtype) {
      where.file->read(where.record, where.byte_offset, bytes, target.data_ptr());
    } else {
      auto staging = torch::empty({piece.numel}, torch::TensorOptions().dtype(where.dtype));
      where.file->read(where.record, where.byte_offset, bytes, staging.data_ptr());
      target.copy_(staging);
    }
  }
}

torch::Tensor ShardedCheckpoint::materialize(const torch::Tensor& tensor) const {
  if (!is_placeholder(tensor)) return tensor;
  auto values = torch::empty({tensor.numel()}, torch::TensorOptions().dtype(tensor.scalar_type()));
  read(tensor, 0, values);
  return values.view(tensor.sizes());
}

c10::IValue ShardedCheckpoint::materialize(const c10::IValue& value) const {
  if (value.isTensor()) return materialize(value.toTensor());
  if (value.isGenericDict()) {
    const auto dict = value.toGenericDict();
    GenericDict out(dict.keyType(), dict.valueType());
    for (const auto& entry : dict) out.insert(entry.key(), materialize(entry.value()));
    return out;
  }
  if (value.isList()) {
    const auto list = value.toList();
    GenericList out(list.elementType());
    for (const auto& element : list) out.push_back(materialize(element));
    return out;
  }
  if (value.isTuple()) {
    std::vector<c10::IValue> elements;
    for (const auto& element : value.toTupleRef().elements()) elements.push_back(materialize(element));
    return c10::ivalue::Tuple::create(std::move(elements));
  }
  return value;
}

StateDict ShardedCheckpoint::materialize(const StateDict& state) const {
  return StateDict::from_ivalue(materialize(state.to_ivalue()), "checkpoint");
}

uint64_t ShardedCheckpoint::bytes_read() const {
  uint64_t bytes = 0;
  for (const auto& file : files_) bytes += file.file->bytes_read();
  return bytes;
}

std::vector<StateDict> shard_full_checkpoint(const StateDict& full, int64_t world, std::vector<std::string>* notes) {
  check<ConfigurationError>(world >= 1, "sharding a checkpoint: the number of ranks must be >= 1, got ", world);
  check<CheckpointError>(!full.contains("layout") || full.get_string("layout") == "full",
                         "sharding a checkpoint: it is in the '", full.contains("layout") ? full.get_string("layout") : "",
                         "' layout; shard a full checkpoint");
  check<CheckpointError>(full.contains("state_dict") && full.at("state_dict").isGenericDict(),
                         "sharding a checkpoint: it has no 'state_dict' section (a weights file?); shard a checkpoint "
                         "a Trainer wrote");
  const auto note = [&](const std::string& line) {
    if (notes) notes->push_back(line);
  };
  std::vector<StateDict> shards(static_cast<size_t>(world));
  for (auto& shard : shards) {
    for (const auto& key : full.keys()) shard.set(key, full.at(key));
  }

  // The model: floating-point tensors into one flat per dtype, the rest whole in every shard.
  const StateDict model = full.child("state_dict");
  std::vector<c10::ScalarType> order;
  std::map<c10::ScalarType, FlatShardIndex> flats;
  std::map<c10::ScalarType, std::vector<torch::Tensor>> values;
  std::vector<StateDict> states(static_cast<size_t>(world));
  for (const auto& name : model.keys()) {
    const auto value = model.at(name);
    if (!value.isTensor() || !value.toTensor().defined() || !value.toTensor().is_floating_point()) {
      for (auto& state : states) state.set(name, value);
      continue;
    }
    const auto tensor = value.toTensor();
    const auto dtype = tensor.scalar_type();
    if (!flats.count(dtype)) {
      order.push_back(dtype);
      flats[dtype].key = std::string("flat_shard.") + c10::toString(dtype);
    }
    auto& flat = flats[dtype];
    flat.names.push_back(name);
    flat.shapes.push_back(tensor.sizes().vec());
    flat.offsets.push_back(flat.numel);
    flat.numel += tensor.numel();
    values[dtype].push_back(tensor.detach().reshape({-1}));
  }
  std::vector<std::vector<FlatShardIndex>> indices(static_cast<size_t>(world));
  for (const auto dtype : order) {
    const auto& flat = flats[dtype];
    const int64_t slice = (flat.numel + world - 1) / world;
    auto joined = torch::zeros({slice * world}, torch::TensorOptions().dtype(dtype));
    joined.narrow(0, 0, flat.numel).copy_(torch::cat(values[dtype]));
    for (int64_t r = 0; r < world; ++r) {
      FlatShardIndex index = flat;
      index.shard_offset = r * slice;
      index.shard_numel = slice;
      states[static_cast<size_t>(r)].set(flat.key, joined.narrow(0, r * slice, slice).clone());
      indices[static_cast<size_t>(r)].push_back(std::move(index));
    }
  }

  // The optimizers: each parameter's state on the rank holding the fewest bytes so far.
  std::vector<std::vector<OptimizerShardIndex>> layouts(static_cast<size_t>(world));
  // Each built on its own: copies of a GenericList or GenericDict share one container.
  std::vector<GenericList> optimizer_lists;
  for (int64_t r = 0; r < world; ++r) optimizer_lists.emplace_back(c10::AnyType::get());
  if (full.contains("optimizer_states")) {
    for (const auto& item : full.at("optimizer_states").toListRef()) {
      const auto optimizer = StateDict::from_ivalue(item, "optimizer state");
      if (!optimizer.contains("state")) {  // LibTorch's own archive: whole in every shard
        for (int64_t r = 0; r < world; ++r) {
          layouts[static_cast<size_t>(r)].push_back({"replicated", {}});
          optimizer_lists[static_cast<size_t>(r)].push_back(item);
        }
        continue;
      }
      std::vector<GenericDict> parts;
      for (int64_t r = 0; r < world; ++r) parts.emplace_back(c10::IntType::get(), c10::AnyType::get());
      std::vector<int64_t> bytes(static_cast<size_t>(world), 0);
      for (const auto& entry : optimizer.at("state").toGenericDict()) {
        int64_t size = 0;
        for (const auto& value : entry.value().toGenericDict()) {
          if (value.value().isTensor()) size += static_cast<int64_t>(value.value().toTensor().nbytes());
        }
        const auto r = static_cast<size_t>(std::min_element(bytes.begin(), bytes.end()) - bytes.begin());
        bytes[r] += size;
        parts[r].insert(entry.key(), entry.value());
      }
      for (size_t r = 0; r < parts.size(); ++r) {
        StateDict part = shallow_copy(optimizer);
        part.set("state", parts[r]);
        layouts[r].push_back({"partitioned", {}});
        optimizer_lists[r].push_back(part.to_ivalue());
      }
    }
  }

  const bool per_rank_rng = full.contains("rng_states_per_rank") &&
                            static_cast<int64_t>(full.at("rng_states_per_rank").toListRef().size()) == world;
  if (full.contains("rng_states_per_rank") && !per_rank_rng) {
    note("the random states of the " + std::to_string(full.at("rng_states_per_rank").toListRef().size()) +
         " ranks that wrote it do not fit " + std::to_string(world) + " ranks: every shard holds rank 0's");
  }
  if (full.contains("strategy") && full.child("strategy").contains("state") &&
      !full.child("strategy").child("state").empty()) {
    note("the own state of strategy '" + full.child("strategy").get_string("name") + "' is left out (it restarts)");
  }
  std::optional<StateDict> fit_loop;
  if (full.contains("loops")) {
    fit_loop = shallow_copy(full.child("loops").child("fit_loop"));
    if (fit_loop->contains("accumulated_grads") || fit_loop->contains("accumulated_grads_per_rank")) {
      note("the gradients accumulated in the open accumulation window are left out, so its step averages fewer "
           "micro-batches");
      fit_loop->erase("accumulated_grads");
      fit_loop->erase("accumulated_grads_per_rank");
    }
  }
  for (int64_t r = 0; r < world; ++r) {
    auto& shard = shards[static_cast<size_t>(r)];
    StateDict rank, strategy;
    rank.set("rank", r);
    rank.set("world_size", world);
    strategy.set("name", std::string("volt-ckpt convert"));
    shard.set("layout", std::string("sharded"));
    shard.set("shard", rank);
    shard.set("strategy", strategy);
    shard.set("state_dict", states[static_cast<size_t>(r)]);
    if (full.contains("optimizer_states")) shard.set("optimizer_states", optimizer_lists[static_cast<size_t>(r)]);
    shard.set("shard_index", shard_index(indices[static_cast<size_t>(r)], layouts[static_cast<size_t>(r)]));
    if (per_rank_rng) shard.set("rng_states", full.at("rng_states_per_rank").toListRef()[static_cast<size_t>(r)]);
    shard.erase("rng_states_per_rank");
    if (fit_loop) {
      auto loops = shallow_copy(full.child("loops"));
      loops.set("fit_loop", *fit_loop);
      shard.set("loops", loops);
    }
  }
  return shards;
}

StateDict assemble_full_checkpoint(CheckpointIO& io, const fs::path& directory, std::vector<std::string>* notes) {
  const ShardedCheckpoint sharded(io, directory);
  if (notes) *notes = sharded.notes();
  return sharded.materialize(sharded.full());
}
}  // namespace volt

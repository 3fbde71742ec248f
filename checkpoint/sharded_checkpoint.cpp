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

using GenericDict = c10::impl::GenericDict;
using GenericList = c10::impl::GenericList;

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
        auto parsed = FlatShardIndex::from_state_dict(StateDict::from_ivalue(flat, shard.name + " shard index"));
        shard.flats.emplace(parsed.key, std::move(parsed));
      }
      for (const auto& optimizer : index.at("optimizers").toListRef()) {
        shard.optimizers.push_back(
            OptimizerShardIndex::from_state_dict(StateDict::from_ivalue(optimizer, shard.name + " shard index")));
      }
      shards_.push_back(std::move(shard));
    }
  }

  void run() {
    const StateDict& first = *shards_.front().checkpoint;
    StateDict full = first.shallow_copy();
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
    auto strategy = first.child("strategy").shallow_copy();
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
      auto fit_loop = first.child("loops").child("fit_loop").shallow_copy();
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
      auto loops = first.child("loops").shallow_copy();
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
                             "' is of another dtype than in ", shards_.front().name,
                             ": the shards are from different runs");
      slices.emplace_back(&index, std::move(slice));
    }
    std::stable_sort(slices.begin(), slices.end(),
                     [](const auto& a, const auto& b) { return a.first->shard_offset < b.first->shard_offset; });
    Pieces flat{{first.numel}, slices.front().second.dtype, {}};
    // Replicas of a slice (NO_SHARD) hold the same values: the first one serves.
    int64_t covered = 0;
    for (const auto& [index, slice] : slices) {
      if (index->shard_offset >= first.numel) continue;  // a slice of padding only (a small flat on many ranks)
      check<CheckpointError>(index->shard_offset <= covered, shards_.front().name, ": no shard holds values [", covered,
                             ", ", index->shard_offset, ") of '", key, "': the shards are from different runs");
      const int64_t end = std::min(index->shard_offset + index->shard_numel, first.numel);
      if (end <= covered) continue;
      for (auto& piece : slice_pieces(slice.pieces, covered - index->shard_offset, end - covered))
        flat.pieces.push_back(std::move(piece));
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
        check<CheckpointError>(state.contains(key), shard.name, ": no '", key,
                               "' in its state_dict, which its index lists");
        return state.get_tensor(key);
      });
      for (size_t i = 0; i < flat->second.names.size(); ++i)
        out.set(flat->second.names[i], entry_of(joined, flat->second, i));
    }
    return out;
  }

  StateDict optimizer_of(const Shard& shard, size_t i) const {
    const auto& list = shard.checkpoint->at("optimizer_states").toListRef();
    check<CheckpointError>(i < list.size(), shard.name, ": holds ", list.size(),
                           " optimizers' states, the first shard ", "more: the shards are from different saves");
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
      for (const auto& state : states)
        params.push_back(StateDict::from_ivalue(state.at("param_groups").toListRef()[g]).get_ints("params"));
      // A stepped tensor's state in shard r.
      const auto stepped_state = [&](size_t r, int64_t stepped) {
        check<CheckpointError>(stepped >= 0 && stepped < static_cast<int64_t>(params[r].size()), shards_[r].name,
                               ": optimizer ", i, " param group ", g, " has no tensor ", stepped,
                               ": the file is damaged");
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
              found = joined
                          .emplace(std::make_pair(group.flat[p], key),
                                   join_flat(group.flat[p],
                                             [&](const Shard& shard) {
                                               const size_t r = static_cast<size_t>(&shard - shards_.data());
                                               const auto state = stepped_state(r, group.stepped[p]);
                                               check<CheckpointError>(state && state->contains(key), shard.name,
                                                                      ": optimizer ", i, " has no '", key, "' for '",
                                                                      group.flat[p], "', which ", shards_.front().name,
                                                                      " has");
                                               return state->at(key).toTensor();
                                             }))
                          .first;
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
    StateDict full = states.front().shallow_copy();
    full.set("state", out_states);
    full.set("param_groups", out_groups);
    return full;
  }

  StateDict optimizer(size_t i) {
    const auto& kind = shards_.front().optimizers[i].kind;
    if (kind == "flat") return flat_optimizer(i);
    StateDict full = optimizer_of(shards_.front(), i).shallow_copy();
    if (kind == "replicated") return full;
    check<CheckpointError>(kind == "partitioned", shards_.front().name, ": optimizer ", i, " has the unknown layout '",
                           kind, "'; it was written by a newer volt");
    GenericDict merged(c10::IntType::get(), c10::AnyType::get());
    for (const auto& shard : shards_) {
      for (const auto& entry : optimizer_of(shard, i).at("state").toGenericDict())
        merged.insert_or_assign(entry.key(), entry.value());
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
  for (const auto& file : files_) bytes += file.file ? file.file->bytes_read() : 0;  // null: read whole by load()
  return bytes;
}

StateDict assemble_full_checkpoint(CheckpointIO& io, const fs::path& directory, std::vector<std::string>* notes) {
  const ShardedCheckpoint sharded(io, directory);
  if (notes) *notes = sharded.notes();
  return sharded.materialize(sharded.full());
}
}  // namespace volt

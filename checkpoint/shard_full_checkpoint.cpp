#include "checkpoint/shard_full_checkpoint.h"

#include <torch/torch.h>

#include <map>
#include <optional>

#include "checkpoint/optimizer_state.h"
#include "checkpoint/shard_index.h"
#include "core/error.h"

namespace volt {

using GenericDict = c10::impl::GenericDict;
using GenericList = c10::impl::GenericList;

std::vector<StateDict> shard_full_checkpoint(const StateDict& full, int64_t world, std::vector<std::string>* notes) {
  check<ConfigurationError>(world >= 1, "sharding a checkpoint: the number of ranks must be >= 1, got ", world);
  check<CheckpointError>(!full.contains("layout") || full.get_string("layout") == "full",
                         "sharding a checkpoint: it is in the '",
                         full.contains("layout") ? full.get_string("layout") : "", "' layout; shard a full checkpoint");
  check<CheckpointError>(full.contains("state_dict") && full.at("state_dict").isGenericDict(),
                         "sharding a checkpoint: it has no 'state_dict' section (a weights file?); shard a checkpoint "
                         "a Trainer wrote");
  const auto note = [&](const std::string& line) {
    if (notes) notes->push_back(line);
  };
  std::vector<StateDict> shards;
  for (int64_t r = 0; r < world; ++r) shards.push_back(full.shallow_copy());

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
        StateDict part = optimizer.shallow_copy();
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
    fit_loop = full.child("loops").child("fit_loop").shallow_copy();
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
      auto loops = full.child("loops").shallow_copy();
      loops.set("fit_loop", *fit_loop);
      shard.set("loops", loops);
    }
  }
  return shards;
}

}  // namespace volt

#include "strategies/sharded/oss.h"

#include <cmath>

#include "checkpoint/optimizer_state_codec.h"
#include "checkpoint/state_dict_bytes.h"
#include "core/error.h"
#include "distributed/state_gather.h"
#include "strategies/sharded_gradient_norm.h"

namespace volt {

using torch::optim::OptimizerOptions;
using torch::optim::OptimizerParamGroup;

OSS::OSS(std::vector<OptimizerParamGroup> groups, std::unique_ptr<OptimizerOptions> defaults, LocalFactory make_local,
         Communicator& communicator, OSSOptions options)
    : Optimizer(std::move(groups), std::move(defaults)),
      make_local_(std::move(make_local)),
      communicator_(communicator),
      options_(options) {
  check<ConfigurationError>(make_local_ != nullptr,
                            "OSS: expected a function that makes the local optimizer, got none");
  repartition();
}

std::shared_ptr<OSS> OSS::wrap(std::shared_ptr<torch::optim::Optimizer> optimizer, Communicator& communicator,
                               OSSOptions options) {
  check<ConfigurationError>(optimizer != nullptr, "OSS: expected an optimizer to shard, got nullptr");
  check<ConfigurationError>(optimizer->state().empty(), "OSS: the optimizer already has state (it has stepped); "
                            "shard it before its first step, e.g. as it comes out of configure_optimizers");
  std::vector<OptimizerParamGroup> groups(optimizer->param_groups().begin(), optimizer->param_groups().end());
  auto make_local = [optimizer](std::vector<OptimizerParamGroup> shard) {
    auto& own = optimizer->param_groups();
    own.clear();
    for (auto& group : shard) own.push_back(group);
    optimizer->state().clear();
    return optimizer;
  };
  return std::make_shared<OSS>(std::move(groups), optimizer->defaults().clone(), std::move(make_local), communicator,
                               options);
}

std::vector<std::vector<torch::Tensor>> OSS::group_parameters() const {
  std::vector<std::vector<torch::Tensor>> groups;
  for (const auto& group : param_groups_) groups.push_back(group.params());
  return groups;
}

void OSS::repartition() {
  partition_ = options_.partition ? options_.partition(group_parameters(), communicator_.size())
                                  : partition_parameters(group_parameters(), communicator_.size());
  trainable_.clear();
  owner_.clear();
  for (size_t g = 0; g < param_groups_.size(); ++g) {
    const auto& params = param_groups_[g].params();
    for (size_t i = 0; i < params.size(); ++i) {
      trainable_.push_back(params[i].requires_grad());
      owner_[params[i].unsafeGetTensorImpl()] = partition_.owner[g][i];
    }
  }
  std::vector<std::vector<torch::Tensor>> by_owner(partition_.owned.size());
  for (size_t r = 0; r < partition_.owned.size(); ++r) {
    for (size_t g = 0; g < param_groups_.size(); ++g) {
      for (const size_t i : partition_.owned[r][g]) by_owner[r].push_back(param_groups_[g].params()[i]);
    }
  }
  if (options_.gather_parameters) buffers_ = std::make_unique<OwnerBuffers>(by_owner);
  const auto& mine = partition_.owned[static_cast<size_t>(communicator_.rank())];
  std::vector<OptimizerParamGroup> shard;
  for (size_t g = 0; g < param_groups_.size(); ++g) {
    std::vector<torch::Tensor> params;
    for (const size_t i : mine[g]) params.push_back(param_groups_[g].params()[i]);
    shard.emplace_back(std::move(params), param_groups_[g].options().clone());
  }
  local_ = make_local_(std::move(shard));
  check<ConfigurationError>(local_ != nullptr && local_->param_groups().size() == param_groups_.size(),
                            "OSS: expected the local optimizer factory to return an optimizer over the ",
                            param_groups_.size(), " groups it was given");
}

int64_t OSS::owner_of(const torch::Tensor& parameter) const {
  auto found = owner_.find(parameter.unsafeGetTensorImpl());
  return found == owner_.end() ? -1 : found->second;
}

void OSS::sync_options_to_local() {
  for (size_t g = 0; g < param_groups_.size(); ++g) {
    local_->param_groups()[g].set_options(param_groups_[g].options().clone());
  }
}

torch::Tensor OSS::step(LossClosure closure) {
  std::vector<bool> trainable;
  for (const auto& group : param_groups_) {
    for (const auto& p : group.params()) trainable.push_back(p.requires_grad());
  }
  if (trainable != trainable_) {
    // Every rank builds the whole state, repartitions, and keeps its new shard.
    const auto all = communicator_.all_gather_bytes(state_dict_to_bytes(state_with_global_indices()));
    StateDict full = state_dict_from_bytes(all[0], "OSS state of rank 0");
    auto merged = full.at("state").toGenericDict();
    for (size_t r = 1; r < all.size(); ++r) {
      const auto theirs = state_dict_from_bytes(all[r], "OSS state of rank " + std::to_string(r));
      for (const auto& entry : theirs.at("state").toGenericDict()) merged.insert_or_assign(entry.key(), entry.value());
    }
    repartition();
    load_sharded_or_consolidated_state_dict(full, "OSS repartition", {});
  }
  sync_options_to_local();
  auto loss = local_->step(closure);
  if (buffers_) buffers_->synchronize(communicator_, options_.broadcast_fp16);
  return loss;
}

torch::Tensor OSS::clip_grad_norm(double max_norm, double norm_type) {
  std::vector<torch::Tensor> owned_parameters, all_parameters;
  const auto& owned = partition_.owned[static_cast<size_t>(communicator_.rank())];
  for (size_t g = 0; g < owned.size(); ++g) {
    for (const size_t i : owned[g]) owned_parameters.push_back(param_groups_[g].params()[i]);
  }
  for (auto& group : param_groups_) {
    for (auto& p : group.params()) all_parameters.push_back(p);
  }
  return clip_sharded_grad_norm(owned_parameters, all_parameters, max_norm, norm_type, communicator_, "OSS");
}

// ---- checkpoints: PyTorch's layout with global parameter indices

StateDict OSS::state_with_global_indices() const {
  const auto* codec = optimizer_state_codecs().find(*local_);
  check<NotSupportedError>(codec != nullptr, "OSS: no optimizer state codec for the sharded optimizer's class, so "
                           "its shards cannot be consolidated into PyTorch's layout; register one "
                           "(checkpoint/optimizer_state_codec.h)");
  const StateDict local = optimizer_state_dict(*local_);
  const auto local_states = local.at("state").toGenericDict();
  c10::impl::GenericDict states(c10::IntType::get(), c10::AnyType::get());
  c10::impl::GenericList groups(c10::AnyType::get());
  const auto& mine = partition_.owned[static_cast<size_t>(communicator_.rank())];
  int64_t local_index = 0, offset = 0;
  for (size_t g = 0; g < param_groups_.size(); ++g) {
    for (const size_t i : mine[g]) {
      auto found = local_states.find(c10::IValue(local_index++));
      if (found != local_states.end()) states.insert(offset + static_cast<int64_t>(i), found->value());
    }
    StateDict group;
    codec->save_options(param_groups_[g].options(), group);
    c10::impl::GenericList indices(c10::AnyType::get());
    for (size_t i = 0; i < param_groups_[g].params().size(); ++i) indices.push_back(offset + static_cast<int64_t>(i));
    group.set("params", indices);
    groups.push_back(group.to_ivalue());
    offset += static_cast<int64_t>(param_groups_[g].params().size());
  }
  StateDict state;
  state.set("state", states);
  state.set("param_groups", groups);
  state.set("volt_optimizer", codec->name);
  return state;
}

StateDict OSS::shard_state_dict() const { return state_with_global_indices(); }

StateDict OSS::consolidated_state_dict(int64_t root) {
  StateDict mine = state_with_global_indices();
  StateDict only_state;
  only_state.set("state", mine.at("state"));
  const auto all = gather_state_dicts(communicator_, only_state, root);
  if (communicator_.rank() != root) return {};
  auto merged = mine.at("state").toGenericDict();
  for (const auto& theirs : all) {
    for (const auto& entry : theirs.at("state").toGenericDict()) merged.insert_or_assign(entry.key(), entry.value());
  }
  return mine;
}

void OSS::load_sharded_or_consolidated_state_dict(const StateDict& state, const std::string& what,
                                                  const ParameterNamer& name_of) {
  const auto* codec = optimizer_state_codecs().find(*local_);
  check<NotSupportedError>(codec != nullptr, what, ": OSS needs an optimizer state codec for its optimizer class");
  const auto saved_groups = state.at("param_groups");
  check<CheckpointError>(saved_groups.isList() && saved_groups.toListRef().size() == param_groups_.size(), what,
                         ": expected ", param_groups_.size(), " param groups, the checkpoint holds ",
                         saved_groups.isList() ? saved_groups.toListRef().size() : 0,
                         "; configure_optimizers must build the same parameter groups as the run that wrote it");
  const auto saved_states = state.at("state").toGenericDict();
  c10::impl::GenericDict local_states(c10::IntType::get(), c10::AnyType::get());
  c10::impl::GenericList local_groups(c10::AnyType::get());
  const auto& mine = partition_.owned[static_cast<size_t>(communicator_.rank())];
  int64_t local_index = 0, offset = 0;
  for (size_t g = 0; g < param_groups_.size(); ++g) {
    const auto saved = StateDict::from_ivalue(saved_groups.toListRef()[g], what + " param group");
    const auto size = static_cast<int64_t>(param_groups_[g].params().size());
    check<CheckpointError>(static_cast<int64_t>(saved.get_ints("params").size()) == size, what, ": param group ", g,
                           " has ", saved.get_ints("params").size(), " parameters in the checkpoint, ", size,
                           " here; configure_optimizers must build the same parameter groups");
    StateDict local_group;
    for (const auto& key : saved.keys()) {
      if (key != "params") local_group.set(key, saved.at(key));
    }
    c10::impl::GenericList indices(c10::AnyType::get());
    for (const size_t i : mine[g]) {
      auto found = saved_states.find(c10::IValue(offset + static_cast<int64_t>(i)));
      if (found != saved_states.end()) local_states.insert(local_index, found->value());
      indices.push_back(local_index++);
    }
    local_group.set("params", indices);
    local_groups.push_back(local_group.to_ivalue());
    codec->load_options(param_groups_[g].options(), saved);
    offset += size;
  }
  StateDict local;
  local.set("state", local_states);
  local.set("param_groups", local_groups);
  local.set("volt_optimizer", codec->name);
  load_optimizer_state_dict(*local_, local, what, name_of);
}

}  // namespace volt

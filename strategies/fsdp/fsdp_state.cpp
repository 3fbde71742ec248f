#include "strategies/fsdp/fsdp_state.h"

#include "core/error.h"

namespace volt::fsdp {

std::string to_string(StepState state) {
  switch (state) {
    case StepState::Idle: return "Idle";
    case StepState::Forward: return "Forward";
    case StepState::PreBackward: return "PreBackward";
    case StepState::PostBackward: return "PostBackward";
  }
  return "?";
}

FullyShardedUnit& FSDPState::root() const {
  VOLT_INTERNAL_ASSERT(!units_.empty(), "fsdp: the root unit is read before wrap_module built it");
  return *units_.front();
}

Communicator& FSDPState::shard_group() const {
  VOLT_INTERNAL_ASSERT(shard_group_ != nullptr, "fsdp: the shard group is read before wrap_module set it");
  return *shard_group_;
}

void FSDPState::set_units(Units units, std::unique_ptr<ReduceScatterBucket> bucket, Communicator& shard_group) {
  clear();
  units_ = std::move(units);
  bucket_ = std::move(bucket);
  shard_group_ = &shard_group;
}

void FSDPState::clear() {
  layouts_.clear();
  if (bucket_) bucket_->discard();
  units_.clear();  // before the bucket and the order, which the units reach
  bucket_.reset();
  order_ = ExecutionOrder{};
  shard_group_ = nullptr;
  step_ = StepState::Idle;
  in_forward_scope_ = false;
}

std::vector<torch::Tensor> FSDPState::parameters_stepped_as(const torch::Tensor& stepped) const {
  for (const auto& unit : units_) {
    const auto& flat = unit->flat();
    for (size_t e = 0; e < flat.entries().size(); ++e) {
      if (!flat.stepped(e).is_same(stepped)) continue;
      if (flat.layout() == ShardLayout::PerParameter) return {flat.entries()[e].parameter};
      std::vector<torch::Tensor> parameters;
      for (const auto& entry : flat.entries()) parameters.push_back(entry.parameter);
      return parameters;
    }
  }
  return {};
}

const FlatParameter::Entry* FSDPState::entry_named(const std::string& name) const {
  for (const auto& unit : units_) {
    for (const auto& entry : unit->flat().entries()) {
      if (entry.name == name) return &entry;
    }
  }
  return nullptr;
}

void FSDPState::enter_forward_scope() {
  step_ = StepState::Forward;
  in_forward_scope_ = true;
}

void FSDPState::leave_forward_scope() {
  in_forward_scope_ = false;
  if (step_ == StepState::Forward) step_ = StepState::Idle;
}

void FSDPState::begin_backward() { step_ = StepState::PreBackward; }

void FSDPState::end_backward() {
  step_ = in_forward_scope_ ? StepState::Forward : StepState::PostBackward;
  count_shard_gradients();
}

void FSDPState::count_shard_gradients() {
  shard_gradient_bytes_ = 0;
  for (const auto& unit : units_) shard_gradient_bytes_ += unit->flat().shard_gradient_bytes();
}

void FSDPState::after_optimizer_steps() {
  if (!in_forward_scope_) step_ = StepState::Idle;
  // A part a unit kept after a forward whose backward never came (Note [Resharding to a group])
  // holds the values from before the step: dropped, the next gather reads the shards.
  for (auto& unit : units_) {
    if (!unit->flat().gathered() && !unit->flat().prefetching()) unit->flat().release();
  }
}

void FSDPState::regather_root_inside_step() {
  if (!in_forward_scope_ || units_.empty() || root().flat().empty()) return;
  auto& root_flat = root().flat();
  root_flat.release();
  root_flat.gather();
}

void FSDPState::release_gathered_units() {
  for (auto& unit : units_) {
    if (!unit->flat().prefetching()) unit->flat().release();
  }
}

}  // namespace volt::fsdp

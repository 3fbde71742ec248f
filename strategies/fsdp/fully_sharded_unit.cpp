#include "strategies/fsdp/fully_sharded_unit.h"

#include "core/compat.h"
#include "core/error.h"

namespace volt::fsdp {

std::string to_string(TrainingState state) {
  switch (state) {
    case TrainingState::Idle: return "idle";
    case TrainingState::Forward: return "forward";
    case TrainingState::Backward: return "backward";
  }
  return "?";
}

FullyShardedUnit::FullyShardedUnit(std::string name, std::unique_ptr<FlatParameter> flat, UnitSettings settings,
                                   ReduceScatterBucket& bucket, ExecutionOrder* order)
    : name_(std::move(name)), flat_(std::move(flat)), settings_(settings), bucket_(bucket), order_(order) {
  const auto& entries = flat_->entries();
  arrived_.assign(entries.size(), false);
  // An accumulator records its parameter's shape when it is made, and autograd checks every
  // gradient against it: take them while the parameters are gathered (FlatParameter leaves them
  // so), then release. set_data keeps them from then on: the dtype no longer changes.
  for (size_t i = 0; i < entries.size(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(entries[i].parameter);
    hook_keys_.push_back(compat::add_post_hook(*accumulator, [this, i] { on_parameter_gradient(i); }));
    accumulators_.push_back(std::move(accumulator));
  }
  flat_->release();
}

FullyShardedUnit::~FullyShardedUnit() {
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(hook_keys_[i]);
}

std::string FullyShardedUnit::describe() const {
  return settings_.is_root ? std::string("fsdp root unit") : "fsdp unit '" + name_ + "'";
}

void FullyShardedUnit::expect(TrainingState state, const char* what) const {
  check<StateError>(state_ == state, describe(), ": ", what, " while the unit is in its ", to_string(state_),
                    " state (expected ", to_string(state), "). ",
                    state_ == TrainingState::Forward
                        ? "Its forward was re-entered, or an earlier forward threw; a unit runs one forward at a time"
                        : "Forwards and backwards of a sharded model must go through the strategy "
                          "(trainer.fit, or fabric.backward for an own loop), one backward per forward pass");
}

void FullyShardedUnit::before_forward() {
  check<StateError>(state_ != TrainingState::Forward, describe(),
                    ": forward entered again before the previous one returned (a unit cannot call itself)");
  check<StateError>(state_ != TrainingState::Backward, describe(),
                    ": forward called during its backward; run the next forward after backward returns");
  if (order_ != nullptr) order_->record(this);
  flat_->gather();
  state_ = TrainingState::Forward;
  if (settings_.forward_prefetch && order_ != nullptr) {
    if (auto* next = order_->after(this)) next->prefetch_for_forward();
  }
}

void FullyShardedUnit::prefetch_for_forward() {
  if (state_ == TrainingState::Idle) flat_->prefetch();
}

void FullyShardedUnit::prefetch_for_backward() {
  // Not the root (gathered throughout), nor a unit whose backward is over.
  if (state_ == TrainingState::Backward && !backward_done_ && !settings_.is_root) flat_->prefetch();
}

void FullyShardedUnit::after_forward(const torch::Tensor& output) {
  expect(TrainingState::Forward, "after_forward");
  state_ = TrainingState::Idle;
  const bool gradient_follows = torch::GradMode::is_enabled() && output.defined() && output.requires_grad();
  if (settings_.is_root) return;  // the strategy releases the root (its backward starts at once)
  if (!gradient_follows || settings_.reshard_after_forward) flat_->release();
  if (gradient_follows && settings_.reshard_after_forward) {
    std::weak_ptr<FullyShardedUnit> unit = weak_from_this();
    output.register_hook([unit](const torch::Tensor&) {
      if (auto alive = unit.lock()) alive->on_output_gradient();
    });
  }
}

void FullyShardedUnit::abort_forward() {
  if (state_ == TrainingState::Forward) state_ = TrainingState::Idle;
}

void FullyShardedUnit::start_backward(bool synchronize) {
  expect(TrainingState::Idle, "a backward started");
  state_ = TrainingState::Backward;
  synchronize_ = synchronize;
  backward_done_ = false;
  arrived_.assign(arrived_.size(), false);
  arrived_count_ = 0;
}

void FullyShardedUnit::on_output_gradient() {
  expect(TrainingState::Backward, "a gradient reached its outputs");
  if (backward_done_) return;
  flat_->gather();
  if (settings_.backward_prefetch && order_ != nullptr) {
    if (auto* previous = order_->before(this)) previous->prefetch_for_backward();
  }
}

void FullyShardedUnit::on_parameter_gradient(size_t index) {
  expect(TrainingState::Backward, "a parameter's gradient arrived");
  check<StateError>(!backward_done_, describe(), ": parameter '", flat_->entries()[index].name,
                    "' got a gradient after the unit had reduced its gradients in this backward");
  if (arrived_[index]) return;
  arrived_[index] = true;
  if (++arrived_count_ == arrived_.size()) complete_backward();
}

void FullyShardedUnit::reduce_gradients() {
  if (flat_->empty()) return;
  const double pre_divide = settings_.pre_divide;
  auto* flat = flat_.get();
  bucket_.reduce(FlatGradient{flat->padded_numel(), settings_.reduce_dtype, flat->compute_device(),
                              [flat, pre_divide](torch::Tensor rows) { flat->write_flat_gradient(rows, pre_divide); }},
                 [flat, pre_divide](const torch::Tensor& reduced) { flat->accumulate_reduced(reduced, pre_divide); });
}

void FullyShardedUnit::complete_backward() {
  if (synchronize_) reduce_gradients();
  flat_->release();
  backward_done_ = true;
}

void FullyShardedUnit::finish_backward() {
  if (state_ != TrainingState::Backward) return;
  if (!backward_done_) complete_backward();
  state_ = TrainingState::Idle;
}

void FullyShardedUnit::reduce_held_gradients() {
  expect(TrainingState::Idle, "held gradients were reduced");
  reduce_gradients();
}

}  // namespace volt::fsdp

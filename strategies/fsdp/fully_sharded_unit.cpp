#include "strategies/fsdp/fully_sharded_unit.h"

#include <torch/csrc/autograd/functions/utils.h>

#include "core/compat.h"
#include "core/error.h"

namespace volt::fsdp {

namespace {

// The node a unit with frozen parameters puts its forward's inputs through: it passes their
// gradients on unchanged and calls `done` when it runs, which is once all of them are complete.
class InputsGradientNotice : public torch::autograd::Node {
 public:
  explicit InputsGradientNotice(std::function<void()> done) : done_(std::move(done)) {}
  torch::autograd::variable_list apply(torch::autograd::variable_list&& gradients) override {
    done_();
    return std::move(gradients);
  }
  std::string name() const override { return "volt::fsdp::InputsGradientNotice"; }

 private:
  std::function<void()> done_;
};

}  // namespace

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
  // An accumulator records its parameter's shape when it is made, and autograd checks every
  // gradient against it: take them while the parameters are gathered (FlatParameter leaves them
  // so), then release. set_data keeps them from then on: the dtype no longer changes.
  for (size_t e = 0; e < entries.size(); ++e) {
    if (!entries[e].trainable) {
      has_frozen_ = true;
      continue;
    }
    const size_t i = hooked_.size();
    hooked_.push_back(e);
    auto accumulator = torch::autograd::impl::grad_accumulator(entries[e].parameter);
    hook_keys_.push_back(compat::add_post_hook(*accumulator, [this, i] { on_parameter_gradient(i); }));
    accumulators_.push_back(std::move(accumulator));
  }
  arrived_.assign(hooked_.size(), false);
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

void FullyShardedUnit::before_forward(std::vector<torch::Tensor>* inputs) {
  check<StateError>(state_ != TrainingState::Forward, describe(),
                    ": forward entered again before the previous one returned (a unit cannot call itself)");
  check<StateError>(state_ != TrainingState::Backward, describe(),
                    ": forward called during its backward; run the next forward after backward returns");
  if (order_ != nullptr) order_->record(this);
  flat_->gather();
  state_ = TrainingState::Forward;
  watch_inputs(inputs);
  if (settings_.forward_prefetch && order_ != nullptr) {
    if (auto* next = order_->after(this)) next->prefetch_for_forward();
  }
}

void FullyShardedUnit::watch_inputs(std::vector<torch::Tensor>* inputs) {
  if (!has_frozen_ || !torch::GradMode::is_enabled()) return;
  std::vector<size_t> differentiable;
  if (inputs != nullptr) {
    for (size_t i = 0; i < inputs->size(); ++i) {
      if ((*inputs)[i].defined() && (*inputs)[i].requires_grad()) differentiable.push_back(i);
    }
  }
  if (differentiable.empty()) {
    inputs_known_ = false;  // released at the end of backward
    return;
  }
  std::weak_ptr<FullyShardedUnit> unit = weak_from_this();
  const size_t index = watched_.size();
  auto node = std::shared_ptr<InputsGradientNotice>(new InputsGradientNotice([unit, index] {
                                                       if (auto alive = unit.lock()) alive->on_inputs_gradient(index);
                                                     }),
                                                     torch::autograd::deleteNode);
  std::vector<torch::Tensor> watched;
  for (const size_t i : differentiable) watched.push_back((*inputs)[i]);
  node->set_next_edges(torch::autograd::collect_next_edges(watched));
  for (const size_t i : differentiable) {
    auto alias = (*inputs)[i].detach();  // the same storage, its gradient through the node
    torch::autograd::set_history(alias, node);
    (*inputs)[i] = alias;
  }
  watched_.push_back(node);
  watched_ran_.push_back(false);
}

void FullyShardedUnit::forget_inputs() {
  watched_.clear();
  watched_ran_.clear();
  inputs_known_ = true;
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
  if (!gradient_follows) {
    flat_->release();
  } else if (settings_.reshard_after_forward) {
    if (settings_.reshard_group != nullptr) {
      flat_->release_to_group(*settings_.reshard_group);
    } else {
      flat_->release();
    }
  }
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
  check<StateError>(!backward_done_, describe(), ": parameter '", flat_->entries()[hooked_[index]].name,
                    "' got a gradient after the unit had reduced its gradients in this backward");
  if (arrived_[index]) return;
  arrived_[index] = true;
  ++arrived_count_;
  maybe_complete_backward();
}

void FullyShardedUnit::on_inputs_gradient(size_t watched) {
  if (state_ != TrainingState::Backward || backward_done_ || watched >= watched_ran_.size()) return;
  watched_ran_[watched] = true;
  maybe_complete_backward();
}

void FullyShardedUnit::maybe_complete_backward() {
  if (arrived_count_ < arrived_.size()) return;
  if (has_frozen_) {
    // A frozen parameter may still be read by the backward of an input's gradient.
    if (settings_.is_root || !inputs_known_) return;
    for (size_t i = 0; i < watched_.size(); ++i) {
      if (!watched_ran_[i] && !watched_[i].expired()) return;
    }
  }
  complete_backward();
}

void FullyShardedUnit::reduce_gradients() {
  if (flat_->empty()) return;
  const double pre_divide = settings_.pre_divide;
  auto* flat = flat_.get();
  if (flat->gradient_numel() == 0) return;  // frozen parameters only
  bucket_.reduce(FlatGradient{flat->gradient_numel(), settings_.reduce_dtype, flat->compute_device(),
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
  forget_inputs();
  state_ = TrainingState::Idle;
}

void FullyShardedUnit::reduce_held_gradients() {
  expect(TrainingState::Idle, "held gradients were reduced");
  reduce_gradients();
}

}  // namespace volt::fsdp

// The Reducer's checkpoint state (reducer.h: state_dict / load_state_dict).
#include "core/error.h"
#include "strategies/ddp/reducer.h"

namespace volt::ddp {
namespace {

std::vector<int64_t> as_ints(const std::vector<size_t>& values) { return {values.begin(), values.end()}; }

std::string listed(const std::vector<int64_t>& values) {
  std::string text = "[";
  for (size_t i = 0; i < values.size(); ++i) text += (i ? ", " : "") + std::to_string(values[i]);
  return text + "]";
}

// `key`'s list as a permutation of [0, n); throws CheckpointError otherwise.
std::vector<size_t> permutation(const StateDict& state, const std::string& key, size_t n) {
  const auto values = state.get_ints(key);
  std::vector<bool> seen(n, false);
  bool valid = values.size() == n;
  for (size_t i = 0; valid && i < n; ++i) {
    valid = values[i] >= 0 && static_cast<size_t>(values[i]) < n && !seen[static_cast<size_t>(values[i])];
    if (valid) seen[static_cast<size_t>(values[i])] = true;
  }
  check<CheckpointError>(valid, "ddp: expected the reducer state's '", key, "' to order the ", n,
                         " parameters, got ", listed(values), "; the checkpoint is damaged");
  return {values.begin(), values.end()};
}

}  // namespace

StateDict Reducer::state_dict() const {
  check<ConfigurationError>(!active_, "ddp: the reducer's state can only be taken between iterations");
  StateDict state;
  std::vector<int64_t> numels;
  for (const auto& p : parameters_) numels.push_back(p.numel());
  state.set("parameter_numels", numels);
  state.set("synchronized_iterations", synchronized_iterations_);
  state.set("rebuild_due", rebuild_due_);
  state.set("ready_order", as_ints(first_ready_order_));
  state.set("buckets_rebuilt", buckets_rebuilt_);
  state.set("bucket_order", as_ints(rebuilt_order_));
  StateDict hook;
  hook.set("name", hook_->name());
  hook.set("state", hook_->state_dict());
  state.set("comm_hook", hook);
  return state;
}

void Reducer::load_state_dict(const StateDict& state) {
  check<ConfigurationError>(!active_, "ddp: the reducer's state can only be loaded between iterations");
  std::vector<int64_t> numels;
  for (const auto& p : parameters_) numels.push_back(p.numel());
  const auto saved = state.get_ints("parameter_numels");
  check<CheckpointError>(saved == numels, "ddp: expected reducer state for ", numels.size(),
                         " parameters of sizes ", listed(numels), ", got state saved for ", saved.size(),
                         " of sizes ", listed(saved), "; the checkpoint belongs to another model. Load a "
                         "checkpoint of this model, or leave out the strategy's state (the reducer then restarts: "
                         "buckets rebuilt after one iteration, comm hook state fresh)");
  const auto hook = state.child("comm_hook");
  const auto hook_state = hook.child("state");
  check<CheckpointError>(hook_state.empty() || hook.get_string("name") == hook_->name(),
                         "ddp: expected state of comm hook '", hook_->name(), "', got state of '",
                         hook.get_string("name"), "'; resume with the comm_hook the checkpoint was written with");
  const size_t n = parameters_.size();
  const bool rebuilt = state.get_bool("buckets_rebuilt");
  auto bucket_order = rebuilt ? permutation(state, "bucket_order", n) : std::vector<size_t>();
  auto ready_order =
      state.get_ints("ready_order").empty() ? std::vector<size_t>() : permutation(state, "ready_order", n);

  synchronized_iterations_ = state.get_int("synchronized_iterations");
  rebuild_due_ = state.get_bool("rebuild_due");
  first_ready_order_ = std::move(ready_order);
  check<CheckpointError>(!rebuild_due_ || first_ready_order_.size() == n,
                         "ddp: the reducer state says its buckets are due to be rebuilt but holds no gradient order; "
                         "the checkpoint is damaged");
  if (rebuilt) {
    adopt_rebuilt_order(std::move(bucket_order));
  } else if (buckets_rebuilt_) {
    build_buckets(buckets::reverse_registration_order(n));
    buckets_rebuilt_ = false;
    rebuilt_order_.clear();
    hook_->on_buckets_rebuilt(bucket_layout());
  }
  if (!hook_state.empty()) hook_->load_state_dict(hook_state);
}

}  // namespace volt::ddp

#pragma once
// One FSDP unit at run time: its FlatParameter and the lifecycle around the wrapped module's
// forward and backward (fairscale's TrainingState), checked at every transition:
//
//   Idle ──before_forward──► Forward ──after_forward──► Idle ──start_backward──► Backward
//    ▲                                                                              │
//    └──────── all gradients arrived (reduce-scatter, release) / finish_backward ───┘
//
// Forward: the shards are all-gathered before the wrapped module runs; after it, a non-root unit
// releases the gathered parameters (reshard_after_forward, or always outside training) and hooks
// its outputs, so that the first gradient to reach them gathers the parameters again before the
// unit's own backward runs. Backward: a post hook on each parameter's gradient accumulator counts
// the gradients; when all have arrived the unit reduce-scatters them into the shard's gradient
// (unless under no_sync, which keeps the full gradients to accumulate) and releases the
// parameters. The strategy's finish_backward() does the same for a unit some of whose parameters
// got no gradient (zeros are reduced for them), in unit order on every rank. Gradients travel
// through the strategy's ReduceScatterBucket: a small unit's may wait there until the strategy
// flushes it at the end of backward.
//
// Prefetch (Note [Prefetching a unit]; options forward_prefetch, backward_prefetch): with the
// model's ExecutionOrder recorded, a unit's forward starts the all-gather of the unit after it
// before running its own module, and the regather for a unit's backward starts the all-gather of
// the unit before it (whose backward comes next), so that the next unit's communication runs
// while this one computes. At most two units are gathered at once then, instead of one. A
// prefetched unit that does not run is released with the others at the end of backward (in
// evaluation, at its next gather or release).
//
// Frozen parameters (the per-parameter layout shards them, Note [Per-parameter layout]) get no
// gradient to count, yet the unit's backward still reads them (the gradient of the input goes
// through a frozen weight): a unit holding any releases its parameters only once its parameters'
// gradients arrived and the gradients of its forward's inputs were computed. The forward's inputs
// that require grad go through one autograd node of the unit's (aliases of them, FSDP2's
// post-backward function on the inputs), which runs when their gradients are complete: before
// the gradient reaches the previous unit's outputs, so that this unit is released before that one
// is gathered again. Where that cannot be known, at the end of backward (as FSDP2 does): inputs
// not known (a forward run through forward_with, or an argument of volt::call that may hide a
// tensor), no input that requires grad (a frozen parameter's backward may still feed a unit
// nested inside), and the root (gathered for a whole step). A node whose forward never got a
// backward (its graph freed) counts as run.
//
// Every transition that gathers or reduces is a collective: every rank's model must run the same
// units in the same order (as for PyTorch's FSDP). Not thread-safe.
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "strategies/fsdp/execution_order.h"
#include "strategies/fsdp/flat_parameter.h"
#include "strategies/fsdp/reduce_scatter_bucket.h"

namespace volt::fsdp {

enum class TrainingState { Idle, Forward, Backward };
std::string to_string(TrainingState state);

struct UnitSettings {
  bool is_root = false;
  bool reshard_after_forward = true;      // free gathered parameters between forward and backward
  // With reshard_after_forward: keep 1/G of them over this group of G ranks instead of freeing all
  // (Note [Resharding to a group] in flat_parameter.h); null: free all.
  Communicator* reshard_group = nullptr;
  torch::Dtype reduce_dtype = torch::kFloat;  // the dtype gradients are reduce-scattered in
  double pre_divide = 1.0;                // gradient_pre_divide_factor(world)
  bool forward_prefetch = false;          // gather the next unit while this one's forward runs
  bool backward_prefetch = false;         // gather the previous unit while this one's backward runs
};

class FullyShardedUnit : public std::enable_shared_from_this<FullyShardedUnit> {
 public:
  // `name`: the unit's module path in the root ("" for the root), for errors. `flat` (gathered,
  // as constructed) is released once the unit hooked its parameters. `bucket`: where its
  // gradients are reduce-scattered (shared by a strategy's units; it must outlive the unit).
  // `order`: the model's forward order, which the unit records itself in and prefetches by
  // (shared by a strategy's units, outliving them; null: no prefetch).
  FullyShardedUnit(std::string name, std::unique_ptr<FlatParameter> flat, UnitSettings settings,
                   ReduceScatterBucket& bucket, ExecutionOrder* order = nullptr);
  ~FullyShardedUnit();
  FullyShardedUnit(const FullyShardedUnit&) = delete;
  FullyShardedUnit& operator=(const FullyShardedUnit&) = delete;

  const std::string& name() const { return name_; }
  std::string describe() const;  // "fsdp unit 'head.1'" or "fsdp root unit"
  FlatParameter& flat() { return *flat_; }
  const FlatParameter& flat() const { return *flat_; }
  TrainingState state() const { return state_; }
  const UnitSettings& settings() const { return settings_; }

  // Idle → Forward: gathers the parameters (and prefetches the next unit). `inputs`: the forward's
  // tensor arguments (null: not known), which a unit with frozen parameters replaces by aliases
  // that the forward must take instead. [collective]
  void before_forward(std::vector<torch::Tensor>* inputs = nullptr);
  // Forward → Idle: releases the parameters (non-root units, when resharding after forward or
  // when no gradient will follow) and hooks `output` when it requires grad.
  void after_forward(const torch::Tensor& output);
  // Back to Idle after a forward that threw (the exception goes on).
  void abort_forward();

  // Idle → Backward, before the strategy's backward: gradients are expected; `synchronize`:
  // false under no_sync (keep full gradients, reduce nothing).
  void start_backward(bool synchronize);
  // Backward → Idle: reduces (when synchronizing) and releases a unit whose gradients did not all
  // arrive during backward. [collective]
  void finish_backward();
  // Reduce-scatters whatever gradients the parameters hold (a window that closed without
  // backward), through the bucket (flush it after). [collective]
  void reduce_held_gradients();

 private:
  void on_output_gradient();           // the first gradient reached an output: gather again
  void prefetch_for_forward();         // the unit before it in forward is gathering itself
  void prefetch_for_backward();        // the unit after it in forward is gathering for backward
  void on_parameter_gradient(size_t index);
  void on_inputs_gradient(size_t watched);
  void watch_inputs(std::vector<torch::Tensor>* inputs);  // for a unit with frozen parameters
  void maybe_complete_backward();      // complete once every awaited gradient arrived
  void complete_backward();            // reduce (when synchronizing) and release
  void forget_inputs();
  void reduce_gradients();             // through the bucket: the shard's gradient is set when it is reduced
  void expect(TrainingState state, const char* what) const;

  std::string name_;
  std::unique_ptr<FlatParameter> flat_;
  UnitSettings settings_;
  ReduceScatterBucket& bucket_;
  ExecutionOrder* order_;
  TrainingState state_ = TrainingState::Idle;
  bool synchronize_ = true;
  bool backward_done_ = false;
  std::vector<bool> arrived_;  // per trainable entry (hooked_)
  size_t arrived_count_ = 0;
  std::vector<size_t> hooked_;  // the entries whose gradient accumulators are hooked: the trainable
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<uintptr_t> hook_keys_;
  // A unit with frozen parameters: the nodes its forwards' inputs go through since the last
  // backward, and whether each ran.
  bool has_frozen_ = false;
  bool inputs_known_ = true;
  std::vector<std::weak_ptr<torch::autograd::Node>> watched_;
  std::vector<bool> watched_ran_;
};

}  // namespace volt::fsdp

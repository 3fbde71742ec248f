#pragma once
// Note [FSDP's state]: what FSDP keeps from one call to the next has one owner, this object:
// the units (root first), the bucket they reduce-scatter through, their recorded forward order,
// the optimizers' layouts over the shards, the count of gathered bytes, whether gradients
// synchronize (no_sync), and where the step stands (StepState, FSDP2's training state). The
// strategy builds the units into it at wrap_module and clears it at teardown; its three parts
// (gradients, placement, checkpoint state) are each handed the state and their PartContext, and
// none of them holds the strategy. What the parts decide together (the root regathered inside a
// step, the units released after it) is a method here, so one rule has one place.
//
// The step, as the parts see it (automatic optimization: the forward scope closes before the
// backward; a micro-batch of an accumulation window goes from PostBackward to the next Forward):
//
//   Idle ──forward scope──► Forward ──scope ends──► Idle ──pre_backward──► PreBackward
//    ▲                         ▲                                              │ post_backward
//    │                         └───────── next micro-batch ──── PostBackward ◄┘
//    └────────────────── after_optimizer_steps ──────────────────────┘
//
// A manual optimization step runs its backward and optimizer steps inside the forward scope,
// so the scope is tracked on its own (in_forward_scope): post_backward inside it returns to
// Forward, and the scope's end to Idle. A backward that throws leaves PreBackward; the next
// forward scope starts over from it.
// Not thread-safe (one Trainer, one thread).
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "strategies/fsdp/execution_order.h"
#include "strategies/fsdp/fully_sharded_unit.h"
#include "strategies/fsdp/reduce_scatter_bucket.h"
#include "strategies/fsdp/shard_param_groups.h"

namespace volt {
class Communicator;
}

namespace volt::fsdp {

enum class StepState { Idle, Forward, PreBackward, PostBackward };
std::string to_string(StepState state);

class FSDPState {
 public:
  using Units = std::vector<std::shared_ptr<FullyShardedUnit>>;

  FSDPState() = default;
  ~FSDPState() { clear(); }  // the units before the bucket and order they reach
  FSDPState(const FSDPState&) = delete;
  FSDPState& operator=(const FSDPState&) = delete;

  // The units, root first then in module order; empty before wrap_module and after teardown.
  const Units& units() const { return units_; }
  bool empty() const { return units_.empty(); }
  FullyShardedUnit& root() const;
  // The group the units shard over (the world, or the rank alone under NO_SHARD); set with the
  // units.
  Communicator& shard_group() const;
  ReduceScatterBucket* bucket() const { return bucket_.get(); }
  ExecutionOrder& order() { return order_; }
  const std::shared_ptr<GatheredBytes>& gathered() const { return gathered_; }

  // Units and their bucket, built by the strategy (fsdp_units.cpp); the order starts afresh.
  void set_units(Units units, std::unique_ptr<ReduceScatterBucket> bucket, Communicator& shard_group);
  // Forgets the units, the bucket (its pending gradients discarded), the order and the layouts.
  void clear();

  // Each optimizer's param groups as configure_optimizers gave them (setup_optimizers).
  OptimizerLayouts& layouts() { return layouts_; }
  const OptimizerLayouts& layouts() const { return layouts_; }

  // The module's parameters that `stepped` (a tensor the optimizer steps) stands for: a flat
  // unit's, or one parameter per parameter; empty when it is no unit's.
  std::vector<torch::Tensor> parameters_stepped_as(const torch::Tensor& stepped) const;
  // The entry named `name` in some unit's flat parameter; null when none is.
  const FlatParameter::Entry* entry_named(const std::string& name) const;

  // False under no_sync: the units keep full gradients for the window's last micro-batch.
  bool synchronize() const { return synchronize_; }
  void set_synchronize(bool on) { synchronize_ = on; }

  StepState step_state() const { return step_; }
  bool in_forward_scope() const { return in_forward_scope_; }
  // The placement's forward scope opens: the root is gathered for the whole step.
  void enter_forward_scope();
  void leave_forward_scope();
  // The gradients part brackets each backward.
  void begin_backward();
  void end_backward();
  // The window's optimizer steps ran (FSDPStrategy::after_optimizer_steps).
  void after_optimizer_steps();
  // Bytes of the shards' gradients when the last backward's (or window's) gradients were reduced,
  // counted from the live tensors then: the step's gradient memory (the optimizer may drop the
  // gradients before the metrics are read).
  int64_t shard_gradient_bytes() const { return shard_gradient_bytes_; }
  void count_shard_gradients();

  // Note [The root unit inside a step]: the root unit is gathered for a whole step's forward
  // scope, but a manual optimization step runs backward (which releases it) and optimizer steps
  // (which change its shard) inside that scope, and may then run another forward (a GAN's
  // second model). Inside the scope the root is gathered again after each backward and each
  // optimizer step, so that the next forward reads current values; outside it nothing changes.
  // [collective inside the scope]
  void regather_root_inside_step();
  // Releases every gathered unit but those a prefetch is still gathering (waiting for one may
  // throw; it is left to its next gather or release).
  void release_gathered_units();

 private:
  Units units_;
  std::unique_ptr<ReduceScatterBucket> bucket_;
  Communicator* shard_group_ = nullptr;
  ExecutionOrder order_;
  OptimizerLayouts layouts_;
  std::shared_ptr<GatheredBytes> gathered_ = std::make_shared<GatheredBytes>();
  bool synchronize_ = true;
  StepState step_ = StepState::Idle;
  bool in_forward_scope_ = false;
  int64_t shard_gradient_bytes_ = 0;
};

}  // namespace volt::fsdp

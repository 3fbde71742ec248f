#pragma once
// FSDP (ZeRO stage 3; fairscale's FullyShardedDataParallel, PyTorch's FSDP):
// `--strategy fsdp[:key=value,...]`. Parameters, gradients and optimizer state are all sharded:
// the model is split into units (the root, modules wrapped by hand with fsdp::wrap(), and what
// auto-wrap selects by min_num_params), each unit's parameters are one FlatParameter of which
// every rank keeps 1/N, gathered around the unit's forward and backward and released after.
// After a unit's backward its gradients are reduce-scattered so that each rank keeps the
// gradient of its shard; the optimizer steps the shards.
//
// Note [NO_SHARD]: PyTorch's NO_SHARD (Lightning's name too) is DDP inside FSDP's units: every
// rank keeps the whole of every unit, and each unit's flat gradient is all-reduced (the mean over
// the ranks) instead of reduce-scattered. volt builds it from the same parts: the units shard over
// a group of one (the rank alone: its "shard" is the whole flat parameter, the gather a copy into
// the compute dtype), and the bucket all-reduces over the world what that group "reduce-scatters".
// Checkpoints, clipping (over the group of one: every rank's norm is already whole) and the
// optimizer work unchanged. Nothing is sharded, so the memory is DDP's plus the gathered copy; it
// is for a model written for FSDP that should run unsharded, `ddp` being the faster choice.
//
// Lifecycle: wrap_module broadcasts rank 0's parameters and buffers, auto-wraps, builds the
// units (fsdp_units.cpp; params then released); setup_optimizers replaces each unit's parameters
// in the user's optimizers by the unit's shard (shard_param_groups.h). Its parts: gradients
// (fsdp_gradients.h), placement (fsdp_placement.h: the root unit gathered around a forward),
// checkpoint state (fsdp_checkpoint_state.h). Buffers are broadcast from rank 0 once, at setup.
// Not thread-safe (one Trainer, one thread).
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "core/registry.h"
#include "strategies/fsdp/auto_wrap.h"
#include "strategies/fsdp/execution_order.h"
#include "strategies/fsdp/fsdp_options.h"
#include "strategies/fsdp/fully_sharded_unit.h"
#include "strategies/fsdp/shard_param_groups.h"
#include "strategies/parallel_strategy.h"

namespace volt {

class FSDPStrategy : public ParallelStrategy {
 public:
  explicit FSDPStrategy(FSDPOptions options = {});
  ~FSDPStrategy() override;
  std::string name() const override { return "fsdp"; }
  const FSDPOptions& options() const { return options_; }

  // Replaces every unit's parameters in the optimizers by its shard. [collective: none]
  std::vector<std::shared_ptr<torch::optim::Optimizer>> setup_optimizers(
      std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers) override;
  // Gathers every unit into the module's own parameters, puts auto-wrapped entries back and
  // unbinds the wrappers: after a run the model is whole again. [collective]
  void restore_module(torch::nn::Module& module) override;
  // Unbinds and puts entries back without communicating (the parameters stay sharded when a run
  // failed: restore_module did not run).
  void teardown() override;
  // ParallelStrategy's, plus what the units hold on this rank, counted from live tensors:
  // "fsdp/units", "fsdp/shard_bytes" (parameter shards), "fsdp/full_bytes" (what the units'
  // parameters take gathered, padding included), "fsdp/gathered_bytes" (gathered now) and
  // "fsdp/peak_gathered_bytes" (the most gathered at once during the last optimizer step's window)
  // and "fsdp/prefetches" (all-gathers started ahead of their unit by this strategy); on a CUDA
  // device "fsdp/peak_device_bytes", the most the caching allocator has had allocated on it at
  // once (since the process started or the program reset it).
  std::map<std::string, double> metrics() const override;
  void after_optimizer_steps(int64_t global_step) override;

  // ParallelStrategy's, then, inside a step's forward scope (manual optimization), the root unit
  // gathered again from its stepped shard (Note [The root unit inside a step]).
  bool optimizer_step(torch::optim::Optimizer& optimizer,
                      const std::function<void(torch::optim::Optimizer&)>& before_step) override;
  // The unit's parameters for its shard (Strategy::module_parameters_of).
  std::vector<torch::Tensor> module_parameters_of(const torch::Tensor& stepped) const override;

  // The units, root first; empty before setup_module.
  const std::vector<std::shared_ptr<fsdp::FullyShardedUnit>>& units() const { return units_; }

 protected:
  void check_precision(const Precision& precision) const override;
  void wrap_module(torch::nn::Module& module) override;  // [collective]

 private:
  // Its parts read the units, the bucket, the forward order and the optimizer layouts.
  friend class FSDPGradients;
  friend class FSDPPlacement;
  friend class FSDPCheckpointState;

  void build_units(torch::nn::Module& root);
  void unbind_units();
  fsdp::UnitSettings unit_settings(bool is_root) const;
  // The group the units shard over: the world, or this rank alone with NO_SHARD.
  Communicator& shard_group();
  torch::Dtype compute_dtype() const;
  // Note [The root unit inside a step]: the root unit is gathered for a whole step's forward
  // scope, but a manual optimization step runs backward (which releases it) and optimizer steps
  // (which change its shard) inside that scope, and may then run another forward (a GAN's
  // second model). Inside the scope the root is gathered again after each backward and each
  // optimizer step, so that the next forward reads current values; outside it nothing changes.
  // [collective]
  void regather_root_inside_step();

  FSDPOptions options_;
  std::shared_ptr<Communicator> alone_;  // NO_SHARD's group of one (made once, at the first setup)
  torch::nn::Module* module_ = nullptr;
  std::vector<fsdp::AutoWrapped> auto_wrapped_;
  std::vector<std::shared_ptr<fsdp::FullyShardedUnit>> units_;  // root first, then in module order
  std::vector<fsdp::FullyShardedImpl*> bound_;                  // wrappers bound to a unit
  // Each optimizer's param groups as configure_optimizers gave them (setup_optimizers).
  fsdp::OptimizerLayouts layouts_;
  bool synchronize_ = true;
  bool step_scope_open_ = false;  // inside FSDPPlacement::forward_context's scope
  std::shared_ptr<fsdp::GatheredBytes> gathered_ = std::make_shared<fsdp::GatheredBytes>();
  std::unique_ptr<fsdp::ReduceScatterBucket> bucket_;  // shared by the units; built with them
  fsdp::ExecutionOrder order_;                         // the units' forward order, for prefetching
  int64_t last_step_peak_ = 0;
};

// Registers `fsdp` (strategy_registry.cpp).
void register_fsdp_strategy(Registry<Strategy>& registry);

}  // namespace volt

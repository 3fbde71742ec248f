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
// Note [HYBRID_SHARD]: PyTorch's HYBRID_SHARD (HSDP) shards within a node and replicates across
// nodes, so that the gathers, the frequent traffic, stay on the node's fast links. volt builds it
// from the same parts: the units shard over the node group (the Topology's, or nprocs_per_node
// consecutive ranks), and the bucket all-reduces each reduce-scattered shard gradient over the
// rank's peers, the ranks at its place on the other nodes (Topology::peers), so every node ends
// with the same shards. The peers' all-reduces run at the end of backward, in launch order on
// every rank, not as each reduce-scatter completes: a rank blocked in one while its node waits
// for it in a gather would close a cycle across the nodes. On one node it is FULL_SHARD (a
// warning says so). The mean over the world is kept (pre-divided by the world's factor, summed in
// the node, then across nodes). Full checkpoints gather each unit over the node group, so each
// node's first rank holds it whole for a moment; the sharded layout is refused (every node holds
// the same shards).
//
// Lifecycle: wrap_module broadcasts rank 0's parameters and buffers, auto-wraps, builds the
// units (fsdp_units.cpp; params then released); setup_optimizers replaces each unit's parameters
// in the user's optimizers by the unit's shard (shard_param_groups.h). Its parts: gradients
// (fsdp_gradients.h), placement (fsdp_placement.h: the root unit gathered around a forward),
// checkpoint state (fsdp_checkpoint_state.h), which share the units through the FSDPState the
// strategy owns (Note [FSDP's state]). Buffers are broadcast from rank 0 once, at setup.
// Not thread-safe (one Trainer, one thread).
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "core/registry.h"
#include "strategies/fsdp/auto_wrap.h"
#include "strategies/fsdp/fsdp_options.h"
#include "strategies/fsdp/fsdp_state.h"
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
  // HYBRID_SHARD's nprocs_per_node must divide the world size.
  void check_world_size(int64_t world_size) const override;

  // ParallelStrategy's, then, inside a step's forward scope (manual optimization), the root unit
  // gathered again from its stepped shard (Note [The root unit inside a step]).
  bool optimizer_step(torch::optim::Optimizer& optimizer,
                      const std::function<void(torch::optim::Optimizer&)>& before_step) override;
  // Strategy's; a step that fails with LibTorch's error while a module of fsdp:wrap has never run
  // through its unit is reported as the likely cause (a module called as block->forward(...)
  // reads released parameters), with the error it raised.
  torch::Tensor run_step(RunningStage stage, torch::nn::Module& module, const Batch& batch,
                         const StepFunction& step) override;
  // The unit's parameters for its shard (Strategy::module_parameters_of).
  std::vector<torch::Tensor> module_parameters_of(const torch::Tensor& stepped) const override;

  // The units, root first; empty before setup_module.
  const std::vector<std::shared_ptr<fsdp::FullyShardedUnit>>& units() const { return state_->units(); }
  // Where the step stands (Note [FSDP's state]).
  fsdp::StepState step_state() const { return state_->step_state(); }

 protected:
  void check_precision(const Precision& precision) const override;
  void wrap_module(torch::nn::Module& module) override;  // [collective]

 private:
  // fsdp:wrap's modules and those fsdp::shard() marked become units' sites (auto_wrap.h).
  void wrap_selected_modules(torch::nn::Module& root);
  void build_units(torch::nn::Module& root);
  void unbind_units();
  fsdp::UnitSettings unit_settings(bool is_root);
  // The group the units shard over: the world, this rank alone with NO_SHARD, the node with
  // HYBRID_SHARD. [collective the first time for HYBRID_SHARD]
  Communicator& shard_group();
  // The group the shards' gradients are all-reduced over after the shard group's reduction: the
  // world with NO_SHARD, the peers on other nodes with HYBRID_SHARD; null otherwise.
  Communicator* replica_group();
  torch::Dtype compute_dtype() const;

  FSDPOptions options_;
  std::shared_ptr<Communicator> alone_;  // NO_SHARD's group of one (made once, at the first setup)
  torch::nn::Module* module_ = nullptr;
  std::vector<fsdp::AutoWrapped> auto_wrapped_;
  std::vector<fsdp::WrappedModule> wrapped_modules_;
  std::vector<fsdp::FullyShardedImpl*> bound_;  // wrappers bound to a unit
  std::shared_ptr<fsdp::FSDPState> state_ = std::make_shared<fsdp::FSDPState>();  // shared with the parts
  int64_t last_step_peak_ = 0;
};

// Registers `fsdp` (strategy_registry.cpp).
void register_fsdp_strategy(Registry<Strategy>& registry);

}  // namespace volt

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
// units (params then released); setup_optimizers replaces each unit's parameters in the user's
// optimizers by the unit's shard (all of a unit's parameters must be in one param group);
// forward_context gathers the root unit (units below gather themselves; the first forward
// records their order, by which they prefetch when asked); pre_backward /
// post_backward open and close the units' backward; no_sync keeps full gradients until the
// window's last micro-batch. Buffers are broadcast from rank 0 once, at setup.
// Not thread-safe (one Trainer, one thread).
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "core/option_schema.h"
#include "core/registry.h"
#include "strategies/fsdp/auto_wrap.h"
#include "strategies/fsdp/execution_order.h"
#include "strategies/fsdp/flat_optimizer_state.h"
#include "strategies/fsdp/fully_sharded_unit.h"
#include "strategies/parallel_strategy.h"

namespace volt {

// Lightning's (and PyTorch's) names of the sharding settings: FULL_SHARD (reshard_after_forward),
// SHARD_GRAD_OP (no resharding) and NO_SHARD (Note [NO_SHARD]).
enum class ShardingStrategy { FullShard, ShardGradOp, NoShard };

struct FSDPOptions {
  int64_t min_num_params = 100000000;  // auto-wrap threshold (fairscale's default 1e8); 0: root unit only
  std::optional<bool> reshard_after_forward;  // default true (FULL_SHARD)
  std::optional<ShardingStrategy> sharding_strategy;  // unset: FULL_SHARD or SHARD_GRAD_OP by the above
  bool mixed_precision = false;        // gather, compute and reduce in the precision's 16-bit dtype
  bool fp32_reduce_scatter = false;    // with mixed_precision: reduce-scatter gradients in float32
  double bucket_cap_mb = 25;           // units' gradients below it share reduce-scatters; 0: each alone
  bool forward_prefetch = false;       // all-gather the next unit while a unit's forward runs
  bool backward_prefetch = false;      // all-gather the previous unit while a unit's backward runs
  CheckpointLayout state_dict_type = CheckpointLayout::Full;
  bool cpu_offload = false;  // shards, their gradients and the optimizer step in host memory (CUDA only)

  static const OptionSchema<FSDPOptions>& schema();
  // The schema's checks, then the combinations: sharding_strategy and reshard_after_forward must
  // agree (NO_SHARD takes none), fp32_reduce_scatter needs mixed_precision.
  void validate() const;
  bool resharding() const;  // reshard_after_forward as set or implied
  bool sharded() const { return sharding_strategy != ShardingStrategy::NoShard; }
};

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
  ScopeGuard no_sync() override;
  void synchronize_accumulated_gradients(torch::nn::Module& module) override;  // [collective]
  double clip_gradients_norm(torch::optim::Optimizer& optimizer, double max_norm, double norm_type) override;
  CheckpointLayout checkpoint_layout() const override { return options_.state_dict_type; }

  // Full: every parameter unsharded under its name (gathered on every rank), with the buffers.
  // Sharded: each unit's shard ("<unit>.flat_shard", the root's "flat_shard") and the buffers.
  // [collective]
  StateDict model_state_dict(torch::nn::Module& module, CheckpointLayout layout) override;
  void load_model_state_dict(torch::nn::Module& module, const StateDict& state, CheckpointLayout layout, bool strict,
                             const std::string& source) override;
  // Full: PyTorch's layout over the model's parameters (flat_optimizer_state.h), on every rank;
  // Sharded: the optimizer's own state (its shards'). [collective for Full]
  StateDict optimizer_state_dict(torch::optim::Optimizer& optimizer, CheckpointLayout layout) override;
  void load_optimizer_state_dict(torch::optim::Optimizer& optimizer, const StateDict& state, CheckpointLayout layout,
                                 const std::string& what, const ParameterNamer& name_of) override;

  // ParallelStrategy's, plus what the units hold on this rank, counted from live tensors:
  // "fsdp/units", "fsdp/shard_bytes" (parameter shards), "fsdp/full_bytes" (what the units'
  // parameters take gathered, padding included), "fsdp/gathered_bytes" (gathered now) and
  // "fsdp/peak_gathered_bytes" (the most gathered at once during the last optimizer step's window)
  // and "fsdp/prefetches" (all-gathers started ahead of their unit by this strategy); on a CUDA
  // device "fsdp/peak_device_bytes", the most the caching allocator has had allocated on it at
  // once (since the process started or the program reset it).
  std::map<std::string, double> metrics() const override;
  void after_optimizer_steps(int64_t global_step) override;

  // The units, root first; empty before setup_module.
  const std::vector<std::shared_ptr<fsdp::FullyShardedUnit>>& units() const { return units_; }

 protected:
  void check_precision(const Precision& precision) const override;
  void wrap_module(torch::nn::Module& module) override;     // [collective]
  ScopeGuard forward_context(RunningStage stage) override;  // [collective: the root's gather]
  bool evaluation_needs_equal_steps() const override { return true; }
  void pre_backward(const torch::Tensor& loss) override;
  void post_backward(const torch::Tensor& loss) override;  // [collective]

 private:
  void build_units(torch::nn::Module& root);
  void unbind_units();
  fsdp::UnitSettings unit_settings(bool is_root) const;
  // The group the units shard over: the world, or this rank alone with NO_SHARD.
  Communicator& shard_group();
  torch::Dtype compute_dtype() const;
  std::string sharded_key(const fsdp::FullyShardedUnit& unit) const;

  FSDPOptions options_;
  std::shared_ptr<Communicator> alone_;  // NO_SHARD's group of one (made once, at the first setup)
  torch::nn::Module* module_ = nullptr;
  std::vector<fsdp::AutoWrapped> auto_wrapped_;
  std::vector<std::shared_ptr<fsdp::FullyShardedUnit>> units_;  // root first, then in module order
  std::vector<fsdp::FullyShardedImpl*> bound_;                  // wrappers bound to a unit
  // Each optimizer's param groups as configure_optimizers gave them (setup_optimizers).
  std::map<const torch::optim::Optimizer*, std::vector<fsdp::GroupLayout>> layouts_;
  bool synchronize_ = true;
  std::shared_ptr<fsdp::GatheredBytes> gathered_ = std::make_shared<fsdp::GatheredBytes>();
  std::unique_ptr<fsdp::ReduceScatterBucket> bucket_;  // shared by the units; built with them
  fsdp::ExecutionOrder order_;                         // the units' forward order, for prefetching
  int64_t last_step_peak_ = 0;
};

// Registers `fsdp` (strategy_registry.cpp).
void register_fsdp_strategy(Registry<Strategy>& registry);

}  // namespace volt

#pragma once
// Distributed data parallel: every rank holds the whole model, trains on its share of each
// batch, and gradients are averaged over the ranks by a Reducer that overlaps the bucketed
// all-reduces with backward (reducer.h). `--strategy ddp[:key=value,...]`, see DDPOptions.
//
// Lifecycle: setup_module converts the module through the precision and moves it to the device,
// then (wrap_module) broadcasts rank 0's parameters and buffers (after checking that every rank
// built the same model) and builds the Reducer on the module's final tensors; each synchronized backward is bracketed
// by prepare_for_backward / finalize_backward; no_sync() turns synchronization off for accumulation micro-batches;
// forward_context(Training) broadcasts rank 0's buffers first (broadcast_buffers). Not thread-safe (one Trainer, one
// thread).
//
// Post-local-SGD (comm_hook=post_local_sgd) is this strategy plus a hook plus an averager: the hook
// (strategies/ddp/hooks/post_local_sgd_hook.h) reduces gradients within a subgroup of the run's
// Topology after the warm-up, and the model averager (strategies/averaging/) that comes with it
// averages the parameters in after_optimizer_steps (synchronize_models).
#include <memory>
#include <optional>

#include "strategies/averaging/local_model_checkpoint.h"
#include "strategies/averaging/model_averager.h"
#include "strategies/buffer_broadcast_placement.h"
#include "strategies/ddp/comm_hook.h"
#include "strategies/ddp/comm_hook_registry.h"
#include "strategies/ddp/ddp_checkpoint_state.h"
#include "strategies/ddp/reducer.h"
#include "strategies/parallel_strategy.h"
#include "strategies/reducer_synchronization.h"
#include "core/option_schema.h"
#include "core/registry.h"

namespace volt {

// A low-precision cast around whichever comm hook is chosen (PyTorch's fp16/bf16_compress_wrapper).
enum class CommWrapper { None, FP16, BF16 };

struct DDPOptions {
  double bucket_cap_mb = 25.0;          // bucket size in MiB, > 0; the first bucket holds ≤ 1 MiB
  bool static_graph = false;            // same used parameters every iteration (ddp::StaticGraphRecord)
  bool gradient_as_bucket_view = false; // .grad are views into the bucket buffers (no copies)
  bool find_unused_parameters = false;  // search the graph for parameters without gradients
  bool broadcast_buffers = true;        // rank 0's buffers before every training forward
  std::string activation_checkpointing;  // module types whose forwards run checkpointed; empty: none
  std::string comm_hook = "allreduce";  // a name in ddp::comm_hook_registry(); its keys are ddp's too
  CommWrapper comm_wrapper = CommWrapper::None;  // cast buckets to 16 bits around comm_hook
  bool shard_optimizer = false;         // ZeRO-1: each optimizer wrapped in OSS (optimizer state 1/N)
  // The checkpoint layout: full (one file, the optimizer state consolidated) or sharded (each
  // rank its shard; needs shard_optimizer).
  CheckpointLayout state_dict_type = CheckpointLayout::Full;

  // Every key above with its help and requirement (ddp_strategy.cpp): the registry's declaration.
  static const OptionSchema<DDPOptions>& schema();
  // The keys' requirements and state_dict_type=sharded only with shard_optimizer. What depends on
  // the hook is checked with the hook's spec (DDPStrategy::check_comm_hook).
  void validate() const;
};


class DDPStrategy : public ParallelStrategy, public DDPSectionContext {
 public:
  // `comm_hook`: the hook options.comm_hook names, with its options (nullptr: with its defaults).
  explicit DDPStrategy(DDPOptions options = {}, std::shared_ptr<const ddp::CommHookSpec> comm_hook = nullptr);
  std::string name() const override { return "ddp"; }
  const DDPOptions& options() const { return options_; }

  // Replaces the default all-reduce hook; takes effect at setup_module, or at once after it.
  void set_comm_hook(std::function<std::unique_ptr<ddp::CommHook>(Communicator&)> make_hook);

  void setup_environment(const StrategyEnvironment& environment) override;  // [collective]
  // With shard_optimizer, wraps each optimizer in OSS over this communicator; keeps the
  // optimizers (a post-local-SGD checkpoint holds every rank's optimizer state). [collective]
  std::vector<std::shared_ptr<torch::optim::Optimizer>> setup_optimizers(
      std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers) override;
  // The comm hook's group sizes must divide `world_size` (post_local_sgd's subgroup_size and
  // model_averaging_periods).
  void check_world_size(int64_t world_size) const override;
  // Refuses --cuda-graph (NotSupportedError naming the fix): the bucket all-reduce did not
  // capture on NCCL on a GPU, and on Gloo it runs on the host, which a replay would skip.
  void check_capturable() const override;
  void teardown() override;

  // The Communicator's counters (ParallelStrategy::metrics) plus, after a synchronized iteration,
  // what the comm hook sent then: "comm_hook/step_bytes" and "comm_hook/compression_ratio" (its
  // bytes over a plain all-reduce of the same buckets: 0.5 for fp16/bf16, PowerSGD's formula).
  std::map<std::string, double> metrics() const override;

  // The reducer; throws InternalError before setup_module.
  ddp::Reducer& reducer() const override;
  // The model averager the comm hook came with (post_local_sgd); nullptr without one.
  averaging::ModelAverager* model_averager() const override { return averager_.get(); }
  // This rank's module and optimizers, whose state a checkpoint of the local phase holds.
  averaging::LocalModel local_model() const override { return {module_, &optimizers_}; }

 protected:
  void wrap_module(torch::nn::Module& module) override;  // [collective]
  // Gradient compression of gradients already in 16 bits (16-true, bf16-true) is refused.
  void check_precision(const Precision& precision) const override;
  // Runs the model averager, if any, on the reducer's parameters. [collective at averaging steps]
  void synchronize_models(int64_t global_step) override;
  // Replaces the model averager (SlowMo installs its own); call from wrap_module.
  void set_model_averager(std::unique_ptr<averaging::ModelAverager> averager);
  // The optimizers setup_optimizers returned.
  const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers() const { return optimizers_; }

 private:
  // The chosen hook over the communicator, inside comm_wrapper's cast when one is set.
  std::unique_ptr<ddp::CommHook> build_hook();
  // Refuses what the options cannot do with the hook, from its spec's traits: a wrapper around
  // `noop` (nothing to compress) or around a hook that already compresses (fp16_compress,
  // bf16_compress), and a hook that steps locally (post_local_sgd) with shard_optimizer.
  //
  // Note [Post-local-SGD and a sharded optimizer]: a sharded optimizer (ZeRO-1, `shard_optimizer`)
  // steps only this rank's shard and then all-gathers the updated parameters from their owners,
  // which makes every rank's model the owners' again after every step: local steps, and their
  // per-subgroup gradients, would be overwritten. The two are refused together.
  void check_comm_hook() const;
  // Whether buckets travel in 16 bits (a compressing hook, or a wrapper).
  bool compresses_to_16_bits() const;
  // The traits of the hook make_hook_ makes: the spec's, or none for set_comm_hook's.
  const ddp::CommHookTraits& hook_traits() const;
  DDPOptions options_;
  std::shared_ptr<const ddp::CommHookSpec> comm_hook_spec_;
  // Set by set_comm_hook: a hook of the caller's declares no traits.
  std::optional<ddp::CommHookTraits> caller_hook_traits_;
  torch::nn::Module* module_ = nullptr;
  std::unique_ptr<ddp::Reducer> reducer_;
  std::function<std::unique_ptr<ddp::CommHook>(Communicator&)> make_hook_;
  std::unique_ptr<averaging::ModelAverager> averager_;
  std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers_;
  std::shared_ptr<ReducerSynchronization> gradients_;
  std::shared_ptr<BufferBroadcastPlacement> buffers_;
};

// Registers `ddp`, its comm_hook extension with ddp::comm_hook_registry(), and its alias
// `ddp_find_unused_parameters_true` (strategy_registry.cpp).
void register_ddp_strategies(Registry<Strategy>& registry);

}  // namespace volt

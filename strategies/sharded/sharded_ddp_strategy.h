#pragma once
// ShardedDDP + OSS (ZeRO stage 2; fairscale's ShardedDataParallel, Lightning 1.x's `ddp_sharded`):
// `--strategy ddp_sharded[:key=value,...]` (alias `sharded`). Every rank holds the whole model and
// trains on its share of each batch like DDP, but each optimizer is wrapped in OSS (every rank
// keeps the state of its shard of the parameters) and each gradient is reduced to the rank that
// owns its parameter (ShardedReducer) instead of all-reduced, so that gradients and optimizer
// state both take ~1/N of their DDP memory per rank. After its step, the owners' parameters are
// all-gathered (OSS). Gradients reduce-scattered to owners plus parameters all-gathered move
// what DDP's all-reduce moves; the step is 1/N of the optimizer's.
//
// Lifecycle: setup_module broadcasts rank 0's parameters and buffers; setup_optimizers shards the
// optimizers and builds the reducer from their partitions (a trainable parameter in no optimizer
// is an error: nobody would own its gradient). Its parts: the gradients part drives the reducer
// (reducer_synchronization.h; no_sync() accumulates locally, full-size gradients on every rank,
// and reduces once per window), the placement part broadcasts rank 0's buffers before each
// training forward (buffer_broadcast_placement.h), the checkpoint part is the default over OSS. Gradient clipping by
// norm runs over the shards (OSS); the GradScaler's inf check is global (any rank's inf in its shard skips the step on
// all). Not thread-safe (one Trainer, one thread).
#include <memory>

#include "core/option_schema.h"
#include "core/registry.h"
#include "strategies/buffer_broadcast_placement.h"
#include "strategies/parallel_strategy.h"
#include "strategies/reducer_synchronization.h"
#include "strategies/sharded/oss.h"
#include "strategies/sharded/sharded_reducer.h"

namespace volt {

struct ShardedDDPOptions {
  int64_t reduce_buffer_size = int64_t{1} << 23;  // elements of a bucket's reduce buffer; 0: each alone
  bool reduce_fp16 = false;       // gradients travel in float16
  bool broadcast_fp16 = false;    // OSS sends updated parameters in float16
  bool broadcast_buffers = true;  // rank 0's buffers before every training forward
  CheckpointLayout state_dict_type = CheckpointLayout::Full;  // consolidated file, or a shard per rank
  std::string activation_checkpointing;  // module types whose forwards run checkpointed; empty: none

  static const OptionSchema<ShardedDDPOptions>& schema();
  void validate() const { schema().validate(*this); }
};

class ShardedDDPStrategy : public ParallelStrategy {
 public:
  explicit ShardedDDPStrategy(ShardedDDPOptions options = {});
  std::string name() const override { return "ddp_sharded"; }
  const ShardedDDPOptions& options() const { return options_; }

  // Wraps every optimizer in OSS, then builds the reducer. [collective]
  std::vector<std::shared_ptr<torch::optim::Optimizer>> setup_optimizers(
      std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers) override;
  void teardown() override;

  // The reducer; throws InternalError before setup_optimizers.
  ShardedReducer& reducer() const;

 protected:
  void wrap_module(torch::nn::Module& module) override;  // [collective]

 private:
  // The reducer's synchronization, except that a window closed without backward is averaged and
  // then the non-owners drop the gradients (as after a reduce). [collective]
  class Gradients : public ReducerSynchronization {
   public:
    Gradients(const PartContext& context, ProcessGroupContext& group) : ReducerSynchronization(context, group) {}
    // The sharded reducer this part drives (ReducerSynchronization::attach); nullptr at teardown.
    void attach(ShardedReducer* reducer) {
      ReducerSynchronization::attach(reducer);
      sharded_ = reducer;
    }
    void synchronize_accumulated_gradients(torch::nn::Module& module) override;

   private:
    ShardedReducer* sharded_ = nullptr;
  };

  ShardedDDPOptions options_;
  torch::nn::Module* module_ = nullptr;
  std::unique_ptr<ShardedReducer> reducer_;
  std::shared_ptr<Gradients> gradients_;
  std::shared_ptr<BufferBroadcastPlacement> buffers_;
};

// Registers `ddp_sharded` and its alias `sharded` (strategy_registry.cpp).
void register_sharded_strategies(Registry<Strategy>& registry);

}  // namespace volt

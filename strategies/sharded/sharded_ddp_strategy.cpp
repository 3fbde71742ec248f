#include "strategies/sharded/sharded_ddp_strategy.h"

#include "core/error.h"
#include "strategies/optimizer_sharding.h"
#include "strategies/shared_strategy_options.h"

namespace volt {

const OptionSchema<ShardedDDPOptions>& ShardedDDPOptions::schema() {
  static const auto schema =
      OptionSchema<ShardedDDPOptions>("--strategy ddp_sharded")
          .option("reduce_buffer_size", &ShardedDDPOptions::reduce_buffer_size,
                  "elements of a bucket's reduce buffer, which consecutive gradients share (0: each reduced alone)",
                  at_least(int64_t{0}))
          .option("reduce_fp16", &ShardedDDPOptions::reduce_fp16, "reduce gradients in float16")
          .option("broadcast_fp16", &ShardedDDPOptions::broadcast_fp16,
                  "send updated parameters in float16 (every rank keeps the rounded values)")
          .with(broadcast_buffers_option(&ShardedDDPOptions::broadcast_buffers))
          .with(activation_checkpointing_option(&ShardedDDPOptions::activation_checkpointing))
          .choice("state_dict_type", &ShardedDDPOptions::state_dict_type,
                  {{"full", CheckpointLayout::Full}, {"sharded", CheckpointLayout::Sharded}},
                  "checkpoint layout: one consolidated file, or each rank's shard")
          .validated_by_what_it_builds();  // the strategy's constructor validates (users build it from a struct too)
  return schema;
}

ShardedDDPStrategy::ShardedDDPStrategy(ShardedDDPOptions options)
    : options_(options),
      gradients_(std::make_shared<Gradients>(*this, *this)),
      buffers_(std::make_shared<BufferBroadcastPlacement>(*this, *this, options_.broadcast_buffers)) {
  options_.validate();
  set_activation_checkpointing(checkpointing_policy(options_.activation_checkpointing));
  hold(gradients_);
  hold(buffers_);
  hold(std::make_shared<CheckpointState>(*this, options_.state_dict_type));
  hold(std::make_shared<OptimizerSharding>(name()));
}

void ShardedDDPStrategy::wrap_module(torch::nn::Module& module) {
  ParallelStrategy::wrap_module(module);
  module_ = &module;
  buffers_->attach(&module);
  gradients_->attach(nullptr);
  reducer_.reset();  // built from the optimizers' partitions
}

std::vector<std::shared_ptr<torch::optim::Optimizer>> ShardedDDPStrategy::setup_optimizers(
    std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers) {
  VOLT_INTERNAL_ASSERT(module_ != nullptr, "ddp_sharded: setup_optimizers runs after setup_module");
  std::vector<std::shared_ptr<OSS>> sharded;
  OSSOptions oss_options;
  oss_options.broadcast_fp16 = options_.broadcast_fp16;
  for (auto& optimizer : optimizers) {
    sharded.push_back(OSS::wrap(optimizer, communicator(), oss_options));
    optimizer = sharded.back();
  }
  std::vector<torch::Tensor> parameters;
  std::vector<std::string> names;
  std::vector<int64_t> owners;
  for (const auto& item : module_->named_parameters()) {
    if (!item.value().requires_grad()) continue;
    int64_t owner = -1;
    for (const auto& oss : sharded) {
      if (owner < 0) owner = oss->owner_of(item.value());
    }
    check<ConfigurationError>(owner >= 0, "ddp_sharded: parameter '", item.key(), "' requires grad but is in none of ",
                              "the optimizers configure_optimizers returned, so no rank owns its gradient; add it to "
                              "an optimizer or set requires_grad false");
    parameters.push_back(item.value());
    names.push_back(item.key());
    owners.push_back(owner);
  }
  ShardedReducerOptions reducer_options;
  reducer_options.reduce_buffer_size = options_.reduce_buffer_size;
  reducer_options.reduce_fp16 = options_.reduce_fp16;
  reducer_ = std::make_unique<ShardedReducer>(std::move(parameters), std::move(names), std::move(owners),
                                              communicator(), reducer_options);
  gradients_->attach(reducer_.get());
  return optimizers;
}

void ShardedDDPStrategy::Gradients::synchronize_accumulated_gradients(torch::nn::Module& module) {
  ReducerSynchronization::synchronize_accumulated_gradients(module);
  VOLT_INTERNAL_ASSERT(sharded_ != nullptr, "ddp_sharded: the reducer is used before the strategy built it");
  sharded_->drop_gradients_of_other_owners();
}

void ShardedDDPStrategy::teardown() {
  gradients_->attach(nullptr);
  buffers_->attach(nullptr);
  reducer_.reset();
  module_ = nullptr;
  ParallelStrategy::teardown();
}

ShardedReducer& ShardedDDPStrategy::reducer() const {
  VOLT_INTERNAL_ASSERT(reducer_ != nullptr, "ddp_sharded: the reducer is used before setup_optimizers()");
  return *reducer_;
}

void register_sharded_strategies(Registry<Strategy>& registry) {
  registry.add("ddp_sharded",
               "ShardedDDP + OSS (ZeRO-2): optimizer state and gradients sharded, each gradient reduced to its owner",
               ShardedDDPOptions::schema(),
               [](const ShardedDDPOptions& options) { return std::make_shared<ShardedDDPStrategy>(options); });
  registry.add_alias("sharded", "ddp_sharded", {}, "ddp_sharded (fairscale's and Lightning's other name)");
}

}  // namespace volt

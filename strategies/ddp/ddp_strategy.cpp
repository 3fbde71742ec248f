#include "strategies/ddp/ddp_strategy.h"

#include "core/error.h"
#include "core/registry.h"
#include "strategies/ddp/ddp_checkpoint_state.h"
#include "strategies/ddp/hooks/compression_wrapper.h"
#include "strategies/optimizer_sharding.h"
#include "strategies/sharded/oss.h"
#include "strategies/shared_strategy_options.h"

namespace volt {

const OptionSchema<DDPOptions>& DDPOptions::schema() {
  static const auto schema =
      OptionSchema<DDPOptions>("--strategy ddp")
          .with(ddp_bucket_cap_mb_option(&DDPOptions::bucket_cap_mb))
          .option("static_graph", &DDPOptions::static_graph,
                  "every iteration uses the same parameters: record them once, skip the search")
          .option("gradient_as_bucket_view", &DDPOptions::gradient_as_bucket_view,
                  "gradients are views into the bucket buffers")
          .option("find_unused_parameters", &DDPOptions::find_unused_parameters,
                  "search the autograd graph for parameters that get no gradient")
          .with(broadcast_buffers_option(&DDPOptions::broadcast_buffers))
          .with(activation_checkpointing_option(&DDPOptions::activation_checkpointing))
          .option("comm_hook", &DDPOptions::comm_hook,
                  "how a gradient bucket is reduced; the hook's own options (below) are ddp's too",
                  satisfies([](const std::string& name) { return ddp::comm_hook_registry().contains(name); },
                            "a registered comm hook (see --list-strategies)"))
          .alias("ddp_comm_hook")  // Lightning's name
          .choice("comm_wrapper", &DDPOptions::comm_wrapper,
                  {{"none", CommWrapper::None}, {"fp16", CommWrapper::FP16}, {"bf16", CommWrapper::BF16}},
                  "cast each bucket to 16 bits around comm_hook (PyTorch's fp16/bf16_compress_wrapper)")
          .alias("ddp_comm_wrapper")  // Lightning's name
          .option("shard_optimizer", &DDPOptions::shard_optimizer,
                  "ZeRO-1: each rank keeps the optimizer state of its shard of the parameters (OSS)")
          .alias("zero_optimizer")
          .choice("state_dict_type", &DDPOptions::state_dict_type,
                  {{"full", CheckpointLayout::Full}, {"sharded", CheckpointLayout::Sharded}},
                  "checkpoint layout: one consolidated file, or each rank's shard (needs shard_optimizer)")
          .validated_by_what_it_builds();  // the strategy's constructor validates (users build it from a struct too)
  return schema;
}

void DDPOptions::validate() const {
  schema().validate(*this);
  check<ConfigurationError>(state_dict_type == CheckpointLayout::Full || shard_optimizer,
                            "--strategy ddp: state_dict_type=sharded needs shard_optimizer=true (without it every "
                            "rank holds the same whole state; there is nothing to shard)");
}

void DDPStrategy::check_comm_hook() const {
  const std::string& hook = comm_hook_spec_->name();
  const auto& traits = comm_hook_spec_->traits();
  check<ConfigurationError>(!traits.steps_locally || !options_.shard_optimizer, "--strategy ddp: comm_hook=", hook,
                            " with shard_optimizer=true: a sharded optimizer makes every rank's parameters those of "
                            "their owners after each step, which undoes local SGD (Note [Post-local-SGD and a sharded "
                            "optimizer]); drop one of the two");
  if (options_.comm_wrapper == CommWrapper::None) return;
  check<ConfigurationError>(traits.communicates, "--strategy ddp: comm_wrapper around comm_hook=", hook,
                            " has nothing to compress (", hook,
                            " communicates nothing); drop comm_wrapper or choose another hook");
  check<ConfigurationError>(!traits.compresses_to_16_bits, "--strategy ddp: comm_hook=", hook,
                            " already compresses to 16 bits; drop comm_wrapper, or wrap allreduce or powersgd");
}

bool DDPStrategy::compresses_to_16_bits() const {
  return options_.comm_wrapper != CommWrapper::None || hook_traits().compresses_to_16_bits;
}

const ddp::CommHookTraits& DDPStrategy::hook_traits() const {
  return caller_hook_traits_ ? *caller_hook_traits_ : comm_hook_spec_->traits();
}

DDPStrategy::DDPStrategy(DDPOptions options, std::shared_ptr<const ddp::CommHookSpec> comm_hook)
    : options_(std::move(options)) {
  options_.validate();
  set_activation_checkpointing(checkpointing_policy(options_.activation_checkpointing));
  if (!comm_hook) comm_hook = ddp::comm_hook_registry().create(options_.comm_hook);
  const auto expected = ddp::comm_hook_registry().canonical_name(options_.comm_hook);
  check<ConfigurationError>(comm_hook->name() == expected, "--strategy ddp: expected the comm hook '", expected,
                            "' that options.comm_hook names, got '", comm_hook->name(), "'; set options.comm_hook to '",
                            comm_hook->name(), "'");
  comm_hook_spec_ = comm_hook;
  check_comm_hook();
  gradients_ = std::make_shared<ReducerSynchronization>(*this, *this, options_.gradient_as_bucket_view);
  buffers_ = std::make_shared<BufferBroadcastPlacement>(*this, *this, options_.broadcast_buffers);
  hold(gradients_);
  hold(buffers_);
  hold(std::make_shared<DDPCheckpointState>(*this, *this, options_.state_dict_type));
  if (options_.shard_optimizer) hold(std::make_shared<OptimizerSharding>(name()));
  make_hook_ = [this](Communicator& communicator) {
    return comm_hook_spec_->make(communicator, comm_hook_spec_->on_topology() ? &node_topology() : nullptr);
  };
}

void DDPStrategy::set_comm_hook(std::function<std::unique_ptr<ddp::CommHook>(Communicator&)> make_hook) {
  check<ConfigurationError>(make_hook != nullptr, "ddp: expected a comm-hook factory, got none");
  make_hook_ = std::move(make_hook);
  caller_hook_traits_ = ddp::CommHookTraits{};
  if (reducer_) reducer_->set_comm_hook(build_hook());
}

std::unique_ptr<ddp::CommHook> DDPStrategy::build_hook() {
  auto hook = make_hook_(gradient_group());
  if (options_.comm_wrapper == CommWrapper::None) return hook;
  check<ConfigurationError>(hook_traits().communicates, "ddp: comm_wrapper around the ", hook->name(),
                            " hook has nothing to compress");
  const auto dtype = options_.comm_wrapper == CommWrapper::FP16 ? torch::kHalf : torch::kBFloat16;
  return std::make_unique<ddp::CompressionWrapper>(dtype, std::move(hook));
}

void DDPStrategy::setup_environment(const StrategyEnvironment& environment) {
  ParallelStrategy::setup_environment(environment);
  const std::string& hook = comm_hook_spec_->name();
  const bool multiplies = comm_hook_spec_->traits().multiplies_matrices;
  check<NotSupportedError>(
      options_.comm_wrapper != CommWrapper::FP16 || !multiplies || float16_matmul_available(root_device()),
      "--strategy ddp: comm_wrapper=fp16 around ", hook,
      " multiplies float16 matrices, which "
      "this LibTorch cannot do on ",
      root_device().str(), "; use comm_wrapper=bf16");
}

void DDPStrategy::check_capturable() const {
  // Run on a GPU for the first time (tools/gpu_check.sh on an H200, cuda:CudaGraph), the capture
  // of ddp's micro-step on NCCL failed: "operation would make the legacy stream depend on a
  // capturing blocking stream". Until it captures there, it is refused before training.
  throw NotSupportedError("--cuda-graph: strategy '" + name() +
                          "' is not captured: its bucket all-reduce on NCCL failed to capture on a GPU (CUDA: "
                          "\"operation would make the legacy stream depend on a capturing blocking stream\"), and "
                          "over Gloo it runs on the host, which a replay would skip; use single_device, or drop "
                          "--cuda-graph");
}

void DDPStrategy::check_world_size(int64_t world_size) const {
  const auto* on_topology = comm_hook_spec_->on_topology();
  if (on_topology && on_topology->check_world_size) on_topology->check_world_size(world_size);
}

std::vector<std::shared_ptr<torch::optim::Optimizer>> DDPStrategy::setup_optimizers(
    std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers) {
  optimizers_ = ParallelStrategy::setup_optimizers(std::move(optimizers));
  if (options_.shard_optimizer) {
    for (auto& optimizer : optimizers_) optimizer = OSS::wrap(optimizer, communicator());
  }
  return optimizers_;
}

void DDPStrategy::check_precision(const Precision& precision) const {
  const auto dtype = precision.parameter_dtype();
  check<ConfigurationError>(!compresses_to_16_bits() || (dtype != torch::kHalf && dtype != torch::kBFloat16),
                            "--strategy ddp: gradient compression to 16 bits (comm_hook=", options_.comm_hook,
                            options_.comm_wrapper == CommWrapper::None ? "" : " with comm_wrapper",
                            ") with --precision ", precision.name(), ", whose gradients are already ",
                            c10::toString(dtype),
                            ": there is nothing to compress; use comm_hook=allreduce, or a "
                            "32-bit precision (32-true, bf16-mixed)");
}

std::map<std::string, double> DDPStrategy::metrics() const {
  auto metrics = ParallelStrategy::metrics();
  if (!reducer_ || reducer_->synchronized_iterations() == 0) return metrics;
  const auto& traffic = reducer_->last_traffic();
  metrics["comm_hook/step_bytes"] = static_cast<double>(traffic.hook_bytes);
  if (traffic.bucket_bytes > 0) {
    metrics["comm_hook/compression_ratio"] =
        static_cast<double>(traffic.hook_bytes) / static_cast<double>(traffic.bucket_bytes);
  }
  return metrics;
}

void DDPStrategy::wrap_module(torch::nn::Module& module) {
  ParallelStrategy::wrap_module(module);  // verifies the model and broadcasts rank 0's state
  module_ = &module;
  std::vector<torch::Tensor> parameters;
  std::vector<std::string> names;
  for (const auto& item : module.named_parameters()) {
    if (!item.value().requires_grad()) continue;
    parameters.push_back(item.value());
    names.push_back(item.key());
  }
  ddp::ReducerOptions reducer_options;
  reducer_options.bucket_cap_mb = options_.bucket_cap_mb;
  reducer_options.static_graph = options_.static_graph;
  reducer_options.gradient_as_bucket_view = options_.gradient_as_bucket_view;
  reducer_options.find_unused_parameters = options_.find_unused_parameters;
  reducer_ = std::make_unique<ddp::Reducer>(std::move(parameters), std::move(names), gradient_group(), reducer_options);
  const auto* on_topology = comm_hook_spec_->on_topology();
  if (on_topology) build_topology(on_topology->node_size);
  reducer_->set_comm_hook(build_hook());
  gradients_->attach(reducer_.get());
  buffers_->attach(&module);
  if (on_topology && on_topology->make_averager) averager_ = on_topology->make_averager(node_topology());
}

void DDPStrategy::set_model_averager(std::unique_ptr<averaging::ModelAverager> averager) {
  averager_ = std::move(averager);
}

void DDPStrategy::synchronize_models(int64_t global_step) {
  if (averager_) averager_->average_parameters(reducer().parameters());
}

void DDPStrategy::teardown() {
  gradients_->attach(nullptr);
  buffers_->attach(nullptr);
  averager_.reset();
  reducer_.reset();
  optimizers_.clear();
  module_ = nullptr;
  ParallelStrategy::teardown();
}

ddp::Reducer& DDPStrategy::reducer() const {
  VOLT_INTERNAL_ASSERT(reducer_ != nullptr, "ddp: the reducer is used before setup_module()");
  return *reducer_;
}

void register_ddp_strategies(Registry<Strategy>& registry) {
  registry.add("ddp", "distributed data parallel: bucketed all-reduce of gradients overlapped with backward",
               DDPOptions::schema(), [](const DDPOptions& options, const OptionValues& values) {
                 // The hook's keys are in `values` too (the comm_hook extension below).
                 return std::make_shared<DDPStrategy>(options,
                                                      ddp::comm_hook_registry().create(options.comm_hook, values));
               });
  registry.extend_options("ddp", "comm_hook", ddp::comm_hook_registry());
  registry.add_alias("ddp_find_unused_parameters_true", "ddp", {{"find_unused_parameters", "true"}},
                     "ddp with find_unused_parameters=true");
}

}  // namespace volt

#include "strategies/ddp/ddp_strategy.h"

#include "core/error.h"
#include "core/warning.h"
#include "strategies/ddp/hooks/compression_wrapper.h"
#include "strategies/sharded/oss.h"
#include "core/registry.h"

namespace volt {

const OptionSchema<DDPOptions>& DDPOptions::schema() {
  static const auto schema =
      OptionSchema<DDPOptions>("--strategy ddp")
          .option("bucket_cap_mb", &DDPOptions::bucket_cap_mb,
                  "bucket size in MiB (the first bucket holds at most 1 MiB)", greater_than(0.0),
                  at_most(1024.0 * 1024.0))
          .option("static_graph", &DDPOptions::static_graph,
                  "every iteration uses the same parameters: record them once, skip the search")
          .option("gradient_as_bucket_view", &DDPOptions::gradient_as_bucket_view,
                  "gradients are views into the bucket buffers")
          .option("find_unused_parameters", &DDPOptions::find_unused_parameters,
                  "search the autograd graph for parameters that get no gradient")
          .option("broadcast_buffers", &DDPOptions::broadcast_buffers, "rank 0's buffers before every training forward")
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
                  "checkpoint layout: one consolidated file, or each rank's shard (needs shard_optimizer)");
  return schema;
}

void DDPOptions::validate() const {
  schema().validate(*this);
  check<ConfigurationError>(state_dict_type == CheckpointLayout::Full || shard_optimizer,
                            "--strategy ddp: state_dict_type=sharded needs shard_optimizer=true (without it every "
                            "rank holds the same whole state; there is nothing to shard)");
  if (comm_wrapper == CommWrapper::None) return;
  const std::string hook = ddp::comm_hook_registry().canonical_name(comm_hook);
  check<ConfigurationError>(hook != "noop", "--strategy ddp: comm_wrapper around comm_hook=noop has nothing to "
                            "compress (noop communicates nothing); drop comm_wrapper or choose another hook");
  check<ConfigurationError>(hook != "fp16_compress" && hook != "bf16_compress", "--strategy ddp: comm_hook=", hook,
                            " already compresses to 16 bits; drop comm_wrapper, or wrap allreduce or powersgd");
}

bool DDPOptions::compresses_to_16_bits() const {
  const std::string hook = ddp::comm_hook_registry().canonical_name(comm_hook);
  return comm_wrapper != CommWrapper::None || hook == "fp16_compress" || hook == "bf16_compress";
}

DDPStrategy::DDPStrategy(DDPOptions options, std::shared_ptr<const ddp::CommHookSpec> comm_hook)
    : options_(std::move(options)) {
  options_.validate();
  if (!comm_hook) comm_hook = ddp::comm_hook_registry().create(options_.comm_hook);
  const auto expected = ddp::comm_hook_registry().canonical_name(options_.comm_hook);
  check<ConfigurationError>(comm_hook->name() == expected, "--strategy ddp: expected the comm hook '", expected,
                            "' that options.comm_hook names, got '", comm_hook->name(),
                            "'; set options.comm_hook to '", comm_hook->name(), "'");
  make_hook_ = [comm_hook](Communicator& communicator) { return comm_hook->make(communicator); };
}

void DDPStrategy::set_comm_hook(std::function<std::unique_ptr<ddp::CommHook>(Communicator&)> make_hook) {
  check<ConfigurationError>(make_hook != nullptr, "ddp: expected a comm-hook factory, got none");
  make_hook_ = std::move(make_hook);
  if (reducer_) reducer_->set_comm_hook(build_hook());
}

std::unique_ptr<ddp::CommHook> DDPStrategy::build_hook() {
  auto hook = make_hook_(communicator());
  if (options_.comm_wrapper == CommWrapper::None) return hook;
  check<ConfigurationError>(hook->name() != "noop", "ddp: comm_wrapper around the noop hook has nothing to compress");
  const auto dtype = options_.comm_wrapper == CommWrapper::FP16 ? torch::kHalf : torch::kBFloat16;
  return std::make_unique<ddp::CompressionWrapper>(dtype, std::move(hook));
}

void DDPStrategy::setup_environment(const StrategyEnvironment& environment) {
  ParallelStrategy::setup_environment(environment);
  const std::string hook = ddp::comm_hook_registry().canonical_name(options_.comm_hook);
  const bool multiplies = hook == "powersgd" || hook == "batched_powersgd";
  check<NotSupportedError>(options_.comm_wrapper != CommWrapper::FP16 || !multiplies ||
                               float16_matmul_available(root_device()),
                           "--strategy ddp: comm_wrapper=fp16 around ", hook, " multiplies float16 matrices, which "
                           "this LibTorch cannot do on ", root_device().str(), "; use comm_wrapper=bf16");
}

void DDPStrategy::check_precision(const Precision& precision) const {
  const auto dtype = precision.parameter_dtype();
  check<ConfigurationError>(!options_.compresses_to_16_bits() || (dtype != torch::kHalf && dtype != torch::kBFloat16),
                            "--strategy ddp: gradient compression to 16 bits (comm_hook=", options_.comm_hook,
                            options_.comm_wrapper == CommWrapper::None ? "" : " with comm_wrapper",
                            ") with --precision ", precision.name(), ", whose gradients are already ",
                            c10::toString(dtype), ": there is nothing to compress; use comm_hook=allreduce, or a "
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
  reducer_ = std::make_unique<ddp::Reducer>(std::move(parameters), std::move(names), communicator(), reducer_options);
  reducer_->set_comm_hook(build_hook());
}

std::vector<std::shared_ptr<torch::optim::Optimizer>> DDPStrategy::setup_optimizers(
    std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers) {
  if (!options_.shard_optimizer) return optimizers;
  for (auto& optimizer : optimizers) optimizer = OSS::wrap(optimizer, communicator());
  return optimizers;
}

void DDPStrategy::teardown() {
  reducer_.reset();
  module_ = nullptr;
  ParallelStrategy::teardown();
}

ddp::Reducer& DDPStrategy::reducer() const {
  VOLT_INTERNAL_ASSERT(reducer_ != nullptr, "ddp: the reducer is used before setup_module()");
  return *reducer_;
}

ScopeGuard DDPStrategy::no_sync() {
  auto& r = reducer();
  const bool previous = r.require_sync();
  r.set_require_sync(false);
  return ScopeGuard([&r, previous] { r.set_require_sync(previous); });
}

ScopeGuard DDPStrategy::forward_context(RunningStage stage) {
  // Only training forwards: evaluation loaders are split unevenly (each sample once), so ranks
  // may run different numbers of evaluation steps and a collective there could wait forever.
  if (stage == RunningStage::Training && options_.broadcast_buffers && module_ != nullptr) {
    broadcast_module_buffers(*module_);
  }
  return ParallelStrategy::forward_context(stage);
}

void DDPStrategy::zero_grad(torch::optim::Optimizer& optimizer) {
  if (!options_.gradient_as_bucket_view) return ParallelStrategy::zero_grad(optimizer);
  // The gradients are the bucket buffers' views: zero them in place, never drop them.
  torch::NoGradGuard no_grad;
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) {
      if (p.grad().defined()) p.mutable_grad().zero_();
    }
  }
}

StateDict DDPStrategy::strategy_state_dict(CheckpointLayout layout) {
  StateDict section;
  const StateDict mine = reducer().state_dict();
  if (layout == CheckpointLayout::Sharded) {
    section.set("reducer", mine);
    return section;
  }
  const auto all = gather_states(mine);
  if (!all.empty()) {
    c10::impl::GenericList per_rank(c10::AnyType::get());
    for (const auto& state : all) per_rank.push_back(state.to_ivalue());
    section.set("reducer_per_rank", per_rank);
  }
  return section;
}

void DDPStrategy::load_strategy_state_dict(const StateDict& state, CheckpointLayout layout) {
  if (state.contains("reducer")) return reducer().load_state_dict(state.child("reducer"));
  if (!state.contains("reducer_per_rank")) return;
  const auto per_rank = state.at("reducer_per_rank");
  check<CheckpointError>(per_rank.isList(), "ddp: the checkpoint's 'reducer_per_rank' is not a list");
  const auto& list = per_rank.toListRef();
  const auto topology = this->topology();
  if (static_cast<int64_t>(list.size()) != topology.world_size) {
    if (is_global_zero()) {
      warn("ddp: the checkpoint holds the reducer state of " + std::to_string(list.size()) + " ranks, this run has " +
           std::to_string(topology.world_size) + ": buckets and the comm hook's state start afresh");
    }
    return;
  }
  reducer().load_state_dict(StateDict::from_ivalue(list[static_cast<size_t>(topology.global_rank)], "ddp reducer state"));
}

void DDPStrategy::pre_backward(const torch::Tensor& loss) { reducer().prepare_for_backward(loss); }

void DDPStrategy::post_backward(const torch::Tensor& loss) { reducer().finalize_backward(); }

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

#include "strategies/fsdp/fsdp_strategy.h"

#include "core/device_memory.h"
#include "core/error.h"
#include "core/warning.h"
#include "precision/mixed_precision.h"
#include "strategies/fsdp/fsdp_checkpoint_state.h"
#include "strategies/fsdp/fsdp_gradients.h"
#include "strategies/fsdp/fsdp_placement.h"
#include "strategies/shared_strategy_options.h"

namespace volt {

FSDPStrategy::FSDPStrategy(FSDPOptions options) : options_(options) {
  options_.validate();
  set_activation_checkpointing(checkpointing_policy(options_.activation_checkpointing));
  hold(std::make_shared<FSDPGradients>(*this, *this, state_));
  hold(std::make_shared<FSDPPlacement>(*this, state_));
  hold(std::make_shared<FSDPCheckpointState>(*this, options_.state_dict_type, state_));
}

FSDPStrategy::~FSDPStrategy() { unbind_units(); }

void FSDPStrategy::check_precision(const Precision& precision) const {
  if (!options_.mixed_precision) return;
  check<ConfigurationError>(dynamic_cast<const MixedPrecision*>(&precision) != nullptr,
                            "--strategy fsdp: mixed_precision=true needs a mixed precision (--precision bf16-mixed "
                            "on CPU, 16-mixed or bf16-mixed on CUDA), got --precision ", precision.name(),
                            "; drop mixed_precision or change the precision");
}

torch::Dtype FSDPStrategy::compute_dtype() const {
  if (options_.mixed_precision) return static_cast<const MixedPrecision&>(precision()).dtype();
  return precision().parameter_dtype();
}

void FSDPStrategy::wrap_module(torch::nn::Module& module) {
  check<StateError>(state_->empty(), "fsdp: the model is still sharded from an earlier run that failed (its parameters "
                    "were not gathered back); build the model again before the next run");
  check<ConfigurationError>(!options_.cpu_offload || root_device().is_cuda(), "--strategy fsdp: cpu_offload=true "
                            "keeps the shards in host memory while a CUDA device computes, but this run computes on ",
                            root_device().str(), " (where every tensor is in host memory already); drop cpu_offload "
                            "or train with --accelerator cuda");
  ParallelStrategy::wrap_module(module);  // every rank starts from rank 0's parameters and buffers
  module_ = &module;
  if (!options_.sharded() && !alone_) {
    // Every rank takes part in making every group of one (new_group's contract); each keeps its own.
    for (int64_t r = 0; r < communicator().size(); ++r) {
      if (auto group = communicator().new_group({r})) alone_ = std::move(group);
    }
  }
  if (options_.hybrid() && build_topology(options_.nprocs_per_node).num_nodes() == 1 && is_global_zero()) {
    warn("--strategy fsdp: sharding_strategy=HYBRID_SHARD with all " + std::to_string(communicator().size()) +
         " processes on one node shards over all of them and replicates nothing, which is FULL_SHARD. Set "
         "nprocs_per_node to simulate several nodes, or run on several");
  }
  try {
    auto_wrapped_ = fsdp::auto_wrap(module, options_.size_threshold());
    wrap_selected_modules(module);  // wrap= and fsdp::shard()
    build_units(module);
  } catch (...) {
    unbind_units();  // nothing half-built stays bound to the model or registered around it
    throw;
  }
}

std::vector<std::shared_ptr<torch::optim::Optimizer>> FSDPStrategy::setup_optimizers(
    std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers) {
  state_->layouts() = fsdp::replace_parameters_by_shards(optimizers, state_->units());
  return optimizers;
}

void FSDPStrategy::restore_module(torch::nn::Module&) {
  for (const auto& unit : state_->units()) unit->flat().restore_parameters();
  unbind_units();
}

void FSDPStrategy::teardown() {
  unbind_units();
  ParallelStrategy::teardown();
}

Communicator& FSDPStrategy::shard_group() {
  if (options_.hybrid()) return build_topology(options_.nprocs_per_node).node();
  if (options_.sharded()) return communicator();
  VOLT_INTERNAL_ASSERT(alone_ != nullptr, "fsdp: NO_SHARD's group of one is made in wrap_module");
  return *alone_;
}

Communicator* FSDPStrategy::replica_group() {
  if (!options_.sharded()) return &communicator();
  if (!options_.hybrid()) return nullptr;
  auto& topology = build_topology(options_.nprocs_per_node);
  return topology.num_nodes() > 1 ? &topology.peers() : nullptr;
}

void FSDPStrategy::check_world_size(int64_t world_size) const {
  check_nprocs_per_node(world_size, options_.nprocs_per_node, "--strategy fsdp");
  options_.check_world_size(world_size);
}

std::map<std::string, double> FSDPStrategy::metrics() const {
  auto metrics = ParallelStrategy::metrics();
  double shard_bytes = 0, full_bytes = 0;
  for (const auto& unit : state_->units()) {
    const auto& flat = unit->flat();
    if (flat.empty()) continue;
    shard_bytes += static_cast<double>(flat.shard().numel() * flat.shard().element_size());
    full_bytes += static_cast<double>(flat.unsharded_bytes());
  }
  metrics["fsdp/units"] = static_cast<double>(state_->units().size());
  metrics["fsdp/shard_bytes"] = shard_bytes;
  metrics["fsdp/full_bytes"] = full_bytes;
  metrics["fsdp/shard_gradient_bytes"] = static_cast<double>(state_->shard_gradient_bytes());
  const auto& gathered = *state_->gathered();
  metrics["fsdp/gathered_bytes"] = static_cast<double>(gathered.now);
  metrics["fsdp/peak_gathered_bytes"] = static_cast<double>(last_step_peak_);
  metrics["fsdp/prefetches"] = static_cast<double>(gathered.prefetches);
  // Read, not reset: the allocator has one peak per device, and the program's own reading (the
  // example's "Peak GPU memory") is of the whole run.
  if (const auto peak = peak_allocated_bytes(root_device()))
    metrics["fsdp/peak_device_bytes"] = static_cast<double>(*peak);
  return metrics;
}

void FSDPStrategy::after_optimizer_steps(int64_t global_step) {
  ParallelStrategy::after_optimizer_steps(global_step);
  last_step_peak_ = state_->gathered()->peak;
  state_->gathered()->reset_peak();
  state_->after_optimizer_steps();
}

bool FSDPStrategy::optimizer_step(torch::optim::Optimizer& optimizer,
                                  const std::function<void(torch::optim::Optimizer&)>& before_step) {
  const bool took = ParallelStrategy::optimizer_step(optimizer, before_step);
  state_->regather_root_inside_step();
  return took;
}

torch::Tensor FSDPStrategy::run_step(RunningStage stage, torch::nn::Module& module, const Batch& batch,
                                     const StepFunction& step) {
  try {
    return ParallelStrategy::run_step(stage, module, batch, step);
  } catch (const c10::Error& error) {
    // LibTorch's own errors only: volt's (a step not defined, a peer's failure) keep their type.
    const auto* unreached = fsdp::first_never_called(wrapped_modules_);
    if (unreached == nullptr) throw;
    const auto& path = unreached->selected.path;
    throw ConfigurationError("--strategy fsdp: the step failed (" + std::string(error.what()) + ") while '" + path +
                             "' (a unit by " + unreached->origin + ") has not run through its unit once: called as " +
                             path + "->forward(...), which LibTorch gives volt no hook into, it reads its released "
                             "(empty) parameters. Call it as volt::call(" + path +
                             ", args...) (nn/module_call.h), put it in a torch::nn::Sequential, or do not make it a "
                             "unit");
  }
}

std::vector<torch::Tensor> FSDPStrategy::module_parameters_of(const torch::Tensor& stepped) const {
  auto parameters = state_->parameters_stepped_as(stepped);
  if (parameters.empty()) return {stepped};  // outside the units: stepped as it is
  return parameters;
}

void register_fsdp_strategy(Registry<Strategy>& registry) {
  registry.add("fsdp",
               "FSDP (ZeRO-3): parameters, gradients and optimizer state sharded; units gather around their "
               "forward and backward",
               FSDPOptions::schema(),
               [](const FSDPOptions& options) { return std::make_shared<FSDPStrategy>(options); });
}

}  // namespace volt

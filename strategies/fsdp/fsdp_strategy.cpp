#include "strategies/fsdp/fsdp_strategy.h"

#include "core/device_memory.h"
#include "core/error.h"
#include "precision/mixed_precision.h"
#include "strategies/fsdp/fsdp_checkpoint_state.h"
#include "strategies/fsdp/fsdp_gradients.h"
#include "strategies/fsdp/fsdp_placement.h"

namespace volt {

FSDPStrategy::FSDPStrategy(FSDPOptions options) : options_(options) {
  options_.validate();
  hold(std::make_shared<FSDPGradients>(*this));
  hold(std::make_shared<FSDPPlacement>(*this));
  hold(std::make_shared<FSDPCheckpointState>(*this, options_.state_dict_type));
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
  check<StateError>(units_.empty(), "fsdp: the model is still sharded from an earlier run that failed (its parameters "
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
  auto_wrapped_ = fsdp::auto_wrap(module, options_.min_num_params);
  build_units(module);
}

std::vector<std::shared_ptr<torch::optim::Optimizer>> FSDPStrategy::setup_optimizers(
    std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers) {
  layouts_ = fsdp::replace_parameters_by_shards(optimizers, units_);
  return optimizers;
}

void FSDPStrategy::restore_module(torch::nn::Module&) {
  for (auto& unit : units_) unit->flat().restore_parameters();
  unbind_units();
}

void FSDPStrategy::teardown() {
  unbind_units();
  ParallelStrategy::teardown();
}

Communicator& FSDPStrategy::shard_group() {
  if (options_.sharded()) return communicator();
  VOLT_INTERNAL_ASSERT(alone_ != nullptr, "fsdp: NO_SHARD's group of one is made in wrap_module");
  return *alone_;
}

std::map<std::string, double> FSDPStrategy::metrics() const {
  auto metrics = ParallelStrategy::metrics();
  double shard_bytes = 0, full_bytes = 0;
  for (const auto& unit : units_) {
    const auto& flat = unit->flat();
    if (flat.empty()) continue;
    shard_bytes += static_cast<double>(flat.shard().numel() * flat.shard().element_size());
    full_bytes += static_cast<double>(flat.padded_numel() * c10::elementSize(flat.compute_dtype()));
  }
  metrics["fsdp/units"] = static_cast<double>(units_.size());
  metrics["fsdp/shard_bytes"] = shard_bytes;
  metrics["fsdp/full_bytes"] = full_bytes;
  metrics["fsdp/gathered_bytes"] = static_cast<double>(gathered_->now);
  metrics["fsdp/peak_gathered_bytes"] = static_cast<double>(last_step_peak_);
  metrics["fsdp/prefetches"] = static_cast<double>(gathered_->prefetches);
  // Read, not reset: the allocator has one peak per device, and the program's own reading (the
  // example's "Peak GPU memory") is of the whole run.
  if (const auto peak = peak_allocated_bytes(root_device()))
    metrics["fsdp/peak_device_bytes"] = static_cast<double>(*peak);
  return metrics;
}

void FSDPStrategy::after_optimizer_steps(int64_t global_step) {
  ParallelStrategy::after_optimizer_steps(global_step);
  last_step_peak_ = gathered_->peak;
  gathered_->reset_peak();
}

bool FSDPStrategy::optimizer_step(torch::optim::Optimizer& optimizer,
                                  const std::function<void(torch::optim::Optimizer&)>& before_step) {
  const bool took = ParallelStrategy::optimizer_step(optimizer, before_step);
  regather_root_inside_step();
  return took;
}

void FSDPStrategy::regather_root_inside_step() {
  if (!step_scope_open_ || units_.empty() || units_.front()->flat().empty()) return;
  auto& root = units_.front()->flat();
  root.release();
  root.gather();
}

std::vector<torch::Tensor> FSDPStrategy::module_parameters_of(const torch::Tensor& stepped) const {
  for (const auto& unit : units_) {
    if (unit->flat().empty() || !unit->flat().shard().is_same(stepped)) continue;
    std::vector<torch::Tensor> parameters;
    for (const auto& entry : unit->flat().entries()) parameters.push_back(entry.parameter);
    return parameters;
  }
  return {stepped};  // outside the units: stepped as it is
}

void register_fsdp_strategy(Registry<Strategy>& registry) {
  registry.add("fsdp",
               "FSDP (ZeRO-3): parameters, gradients and optimizer state sharded; units gather around their "
               "forward and backward",
               FSDPOptions::schema(),
               [](const FSDPOptions& options) { return std::make_shared<FSDPStrategy>(options); });
}

}  // namespace volt

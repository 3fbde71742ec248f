#include "strategies/fsdp/fsdp_strategy.h"

#include <set>

#include "checkpoint/module_state.h"
#include "core/device_memory.h"
#include "core/error.h"
#include "precision/mixed_precision.h"
#include "strategies/sharded_gradient_norm.h"

namespace volt {

const OptionSchema<FSDPOptions>& FSDPOptions::schema() {
  static const auto schema =
      OptionSchema<FSDPOptions>("--strategy fsdp")
          .option("min_num_params", &FSDPOptions::min_num_params,
                  "auto-wrap: a module (a child of a Sequential) with at least this many parameters not yet in a "
                  "unit becomes a unit; 0: the root unit only",
                  at_least(int64_t{0}))
          .option("reshard_after_forward", &FSDPOptions::reshard_after_forward,
                  "free a unit's gathered parameters after its forward and gather them again for its backward "
                  "(default true; false keeps them until after the backward, ZeRO-2 style)")
          .choice("sharding_strategy", &FSDPOptions::sharding_strategy,
                  {{"FULL_SHARD", ShardingStrategy::FullShard},
                   {"SHARD_GRAD_OP", ShardingStrategy::ShardGradOp},
                   {"NO_SHARD", ShardingStrategy::NoShard}},
                  "Lightning's names: FULL_SHARD = reshard_after_forward=true, SHARD_GRAD_OP = false, NO_SHARD = "
                  "nothing sharded, gradients all-reduced (DDP inside the units)")
          .option("mixed_precision", &FSDPOptions::mixed_precision,
                  "gather parameters, compute and reduce gradients in the precision's 16-bit dtype (needs "
                  "--precision bf16-mixed on CPU, 16-mixed or bf16-mixed on CUDA); shards stay float32")
          .option("fp32_reduce_scatter", &FSDPOptions::fp32_reduce_scatter,
                  "with mixed_precision: reduce-scatter gradients in float32")
          .option("bucket_cap_mb", &FSDPOptions::bucket_cap_mb,
                  "MiB of a bucket in which units' smaller flat gradients wait to be reduce-scattered together "
                  "(fairscale's; the result is bit for bit the same); 0: each unit's alone, at once",
                  at_least(0.0), at_most(1024.0 * 1024.0))
          .option("forward_prefetch", &FSDPOptions::forward_prefetch,
                  "start the all-gather of the next unit (in the order of the first forward) before a unit's "
                  "forward runs, so that it overlaps that compute; two units are gathered at once")
          .option("backward_prefetch", &FSDPOptions::backward_prefetch,
                  "with resharding: start the all-gather of the unit whose backward comes next before a unit's "
                  "backward runs (PyTorch's BACKWARD_PRE); two units are gathered at once")
          .choice("state_dict_type", &FSDPOptions::state_dict_type,
                  {{"full", CheckpointLayout::Full}, {"sharded", CheckpointLayout::Sharded}},
                  "checkpoint layout: full (PyTorch's names and optimizer layout, gathered; any strategy and world "
                  "size loads it) or sharded (each rank's flat shards and optimizer shard)")
          .option("cpu_offload", &FSDPOptions::cpu_offload,
                  "keep each rank's parameter shards, their gradients and the optimizer step in pinned host memory "
                  "while a CUDA device computes; units are copied to the device to be gathered (PyTorch's "
                  "CPUOffload(offload_params=True), fairscale's move_params_to_cpu); needs --accelerator cuda");
  return schema;
}

bool FSDPOptions::resharding() const {
  if (sharding_strategy) return *sharding_strategy == ShardingStrategy::FullShard;
  return reshard_after_forward.value_or(true);
}

void FSDPOptions::validate() const {
  schema().validate(*this);
  check<ConfigurationError>(sharded() || !reshard_after_forward, "--strategy fsdp: sharding_strategy=NO_SHARD keeps "
                            "every parameter whole on every rank, so reshard_after_forward does not apply; drop it");
  check<ConfigurationError>(!sharding_strategy || !reshard_after_forward ||
                                *reshard_after_forward == (*sharding_strategy == ShardingStrategy::FullShard),
                            "--strategy fsdp: sharding_strategy=",
                            *sharding_strategy == ShardingStrategy::FullShard ? "FULL_SHARD" : "SHARD_GRAD_OP",
                            " means reshard_after_forward=",
                            *sharding_strategy == ShardingStrategy::FullShard ? "true" : "false",
                            ", but reshard_after_forward is set to the opposite; give one of the two");
  check<ConfigurationError>(!fp32_reduce_scatter || mixed_precision,
                            "--strategy fsdp: fp32_reduce_scatter=true needs mixed_precision=true (without it "
                            "gradients are float32 already)");
}

FSDPStrategy::FSDPStrategy(FSDPOptions options) : options_(options) { options_.validate(); }

FSDPStrategy::~FSDPStrategy() { unbind_units(); }

// A model outlives its strategy: its wrappers must not keep running this strategy's units, nor
// its Sequentials call wrappers the strategy put there.
void FSDPStrategy::unbind_units() {
  for (auto* wrapper : bound_) wrapper->bind(nullptr);
  bound_.clear();
  for (const auto& item : auto_wrapped_) fsdp::unwrap(item);
  auto_wrapped_.clear();
  layouts_.clear();
  if (bucket_) bucket_->discard();
  units_.clear();
  bucket_.reset();
  order_ = fsdp::ExecutionOrder{};
  module_ = nullptr;
}

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

fsdp::UnitSettings FSDPStrategy::unit_settings(bool is_root) const {
  fsdp::UnitSettings settings;
  settings.is_root = is_root;
  settings.reshard_after_forward = options_.resharding();
  settings.reduce_dtype = options_.fp32_reduce_scatter ? torch::kFloat : compute_dtype();
  settings.pre_divide = fsdp::gradient_pre_divide_factor(communicator().size());  // the world's mean
  settings.forward_prefetch = options_.forward_prefetch;
  settings.backward_prefetch = options_.backward_prefetch;
  return settings;
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

// Each trainable parameter belongs to the innermost unit above it: walking the module tree, the
// unit changes where a unit's module is met (a hand-wrapped wrapper, or an auto-wrapped module).
void FSDPStrategy::build_units(torch::nn::Module& root) {
  struct Pending {
    std::string name;
    fsdp::FullyShardedImpl* wrapper;  // null for the root
    std::vector<std::pair<std::string, torch::Tensor>> parameters;
  };
  std::vector<Pending> pending{{"", nullptr, {}}};
  std::unordered_map<const torch::nn::Module*, fsdp::FullyShardedImpl*> auto_unit_of;
  for (const auto& item : auto_wrapped_) auto_unit_of[item.tree_module] = item.unit_module.get();
  std::set<const c10::TensorImpl*> seen;
  std::function<void(torch::nn::Module&, const std::string&, size_t)> walk = [&](torch::nn::Module& m,
                                                                                  const std::string& prefix,
                                                                                  size_t current) {
    auto* wrapper = dynamic_cast<fsdp::FullyShardedImpl*>(&m);
    if (auto it = auto_unit_of.find(&m); it != auto_unit_of.end()) wrapper = it->second;
    if (wrapper != nullptr && &m != &root) {
      pending.push_back({prefix.empty() ? prefix : prefix.substr(0, prefix.size() - 1), wrapper, {}});
      current = pending.size() - 1;
    }
    for (const auto& item : m.named_parameters(/*recurse=*/false)) {
      if (!item.value().requires_grad() || !seen.insert(item.value().unsafeGetTensorImpl()).second) continue;
      pending[current].parameters.emplace_back(prefix + item.key(), item.value());
    }
    for (const auto& child : m.named_children()) walk(*child.value(), prefix + child.key() + ".", current);
  };
  walk(root, "", 0);
  const auto dtype = compute_dtype();
  bucket_ = std::make_unique<fsdp::ReduceScatterBucket>(
      shard_group(), static_cast<int64_t>(options_.bucket_cap_mb * 1024.0 * 1024.0),
      options_.sharded() ? nullptr : &communicator());
  for (size_t i = 0; i < pending.size(); ++i) {
    auto flat = std::make_unique<fsdp::FlatParameter>(std::move(pending[i].parameters), shard_group(), dtype,
                                                      gathered_, communicator().size(), options_.cpu_offload);
    auto unit = std::make_shared<fsdp::FullyShardedUnit>(pending[i].name, std::move(flat), unit_settings(i == 0),
                                                         *bucket_, &order_);
    if (pending[i].wrapper != nullptr) {
      pending[i].wrapper->bind(unit);
      bound_.push_back(pending[i].wrapper);
    }
    units_.push_back(std::move(unit));
  }
}

std::vector<std::shared_ptr<torch::optim::Optimizer>> FSDPStrategy::setup_optimizers(
    std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers) {
  std::unordered_map<const c10::TensorImpl*, std::pair<fsdp::FullyShardedUnit*, size_t>> unit_of;
  for (const auto& unit : units_) {
    const auto& entries = unit->flat().entries();
    for (size_t e = 0; e < entries.size(); ++e) unit_of[entries[e].parameter.unsafeGetTensorImpl()] = {unit.get(), e};
  }
  std::map<const fsdp::FullyShardedUnit*, std::string> placed;  // unit → "optimizer i, group g"
  layouts_.clear();
  for (size_t o = 0; o < optimizers.size(); ++o) {
    auto& groups = optimizers[o]->param_groups();
    auto& layout = layouts_[optimizers[o].get()];
    for (size_t g = 0; g < groups.size(); ++g) {
      const std::string where = "optimizer " + std::to_string(o) + ", param group " + std::to_string(g);
      std::vector<torch::Tensor> replaced;
      std::map<const fsdp::FullyShardedUnit*, size_t> count;
      std::vector<fsdp::FullyShardedUnit*> order;
      fsdp::GroupLayout originals;
      for (const auto& p : groups[g].params()) {
        auto it = unit_of.find(p.unsafeGetTensorImpl());
        if (it == unit_of.end()) {
          originals.push_back({nullptr, 0, replaced.size()});
          replaced.push_back(p);  // not sharded (frozen, or not the module's): stepped as it is
          continue;
        }
        auto* unit = it->second.first;
        if (count[unit]++ == 0) order.push_back(unit);
        originals.push_back({unit, it->second.second, 0});
      }
      std::map<const fsdp::FullyShardedUnit*, size_t> shard_index;
      for (auto* unit : order) {
        check<ConfigurationError>(count[unit] == unit->flat().entries().size(), "fsdp: ", where, " holds ",
                                  count[unit], " of the ", unit->flat().entries().size(), " parameters of ",
                                  unit->describe(), "; a unit's parameters are one flat shard and must all be in "
                                  "one param group (give them the same options, or wrap them in separate units)");
        const auto [it, inserted] = placed.emplace(unit, where);
        check<ConfigurationError>(inserted, "fsdp: the parameters of ", unit->describe(), " are in ", it->second,
                                  " and in ", where, "; each parameter may be stepped by one optimizer only");
        shard_index[unit] = replaced.size();
        replaced.push_back(unit->flat().shard());
      }
      for (auto& original : originals) {
        if (original.unit != nullptr) original.stepped = shard_index.at(original.unit);
      }
      layout.push_back(std::move(originals));
      check<ConfigurationError>(optimizers[o]->state().empty(), "fsdp: ", where,
                                " already has state; build optimizers in configure_optimizers, before any step");
      groups[g].params() = std::move(replaced);
    }
  }
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

ScopeGuard FSDPStrategy::no_sync() {
  const bool previous = synchronize_;
  synchronize_ = false;
  return ScopeGuard([this, previous] { synchronize_ = previous; });
}

ScopeGuard FSDPStrategy::forward_context(RunningStage stage) {
  auto base = ParallelStrategy::forward_context(stage);
  if (units_.empty()) return base;
  auto& root = *units_.front();
  // The root's "forward" is the whole step, which may itself run backward (manual optimization's
  // manual_backward inside training_step): its forward ends as soon as it is gathered, and it
  // stays gathered until its backward (or, below, the end of an evaluation step) releases it.
  order_.start();  // the first forward records the units' order (nothing once recorded)
  root.before_forward();
  root.after_forward(torch::Tensor());
  return ScopeGuard([this, base = std::make_shared<ScopeGuard>(std::move(base))]() mutable {
    order_.stop();
    // No backward follows an evaluation forward: nothing needs the root's parameters until the
    // next forward gathers them, nor another unit's that a prefetch gathered for a forward that
    // did not run it. One still in flight is left to its next gather or release: waiting for a
    // collective may throw, which this exit must not.
    if (!torch::GradMode::is_enabled()) {
      for (auto& unit : units_) {
        if (!unit->flat().prefetching()) unit->flat().release();
      }
    }
    base.reset();
  });
}

void FSDPStrategy::pre_backward(const torch::Tensor&) {
  for (auto& unit : units_) unit->start_backward(synchronize_);
}

void FSDPStrategy::post_backward(const torch::Tensor&) {
  for (auto& unit : units_) unit->finish_backward();
  if (bucket_) bucket_->flush();  // before the step reads the shards' gradients
}

void FSDPStrategy::synchronize_accumulated_gradients(torch::nn::Module&) {
  for (auto& unit : units_) unit->reduce_held_gradients();
  if (bucket_) bucket_->flush();
}

double FSDPStrategy::clip_gradients_norm(torch::optim::Optimizer& optimizer, double max_norm, double norm_type) {
  precision().unscale_gradients(optimizer);
  std::vector<torch::Tensor> parameters;
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) parameters.push_back(p);
  }
  // Each shard's elements are this rank's alone (padding has zero gradient); a parameter outside
  // the units is whole on every rank, which this sum would count N times: refuse rather than
  // report a wrong norm.
  std::set<const c10::TensorImpl*> shards;
  for (const auto& unit : units_) shards.insert(unit->flat().shard().unsafeGetTensorImpl());
  for (const auto& p : parameters) {
    check<NotSupportedError>(shards.count(p.unsafeGetTensorImpl()) > 0, "fsdp: gradient clipping by norm needs "
                             "every parameter of the optimizer inside a unit; one of ", p.numel(),
                             " elements is not (a parameter that does not require grad at setup?)");
  }
  return clip_sharded_grad_norm(parameters, parameters, max_norm, norm_type, shard_group(), "fsdp");
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
  if (const auto peak = peak_allocated_bytes(root_device())) metrics["fsdp/peak_device_bytes"] = static_cast<double>(*peak);
  return metrics;
}

void FSDPStrategy::after_optimizer_steps(int64_t global_step) {
  ParallelStrategy::after_optimizer_steps(global_step);
  last_step_peak_ = gathered_->peak;
  gathered_->reset_peak();
}

std::string FSDPStrategy::sharded_key(const fsdp::FullyShardedUnit& unit) const {
  return unit.settings().is_root ? std::string("flat_shard") : unit.name() + ".flat_shard";
}

StateDict FSDPStrategy::model_state_dict(torch::nn::Module& module, CheckpointLayout layout) {
  StateDict state = module_state_dict(module);  // the units' parameters read as released (empty)
  if (layout == CheckpointLayout::Sharded) {
    for (const auto& unit : units_) {
      for (const auto& entry : unit->flat().entries()) state.erase(entry.name);
      if (!unit->flat().empty()) state.set(sharded_key(*unit), unit->flat().shard().detach());
    }
    return state;
  }
  // Full: every rank gathers every unit; the values replace the released ones under their names,
  // in module order.
  for (const auto& unit : units_) {
    const auto flat = unit->flat().full_values();
    for (const auto& entry : unit->flat().entries()) {
      state.set(entry.name, flat.narrow(0, entry.offset, entry.numel()).view(entry.shape));
    }
  }
  return state;
}

void FSDPStrategy::load_model_state_dict(torch::nn::Module& module, const StateDict& state, CheckpointLayout layout,
                                         bool strict, const std::string& source) {
  StateDict rest = state;
  for (const auto& unit : units_) {
    auto& flat = unit->flat();
    if (flat.empty()) continue;
    if (layout == CheckpointLayout::Sharded) {
      const auto key = sharded_key(*unit);
      check<CheckpointError>(state.contains(key), source, ": no '", key, "' (the shard of ", unit->describe(),
                             "); a sharded fsdp checkpoint resumes with the same model and world size only");
      const auto shard = state.get_tensor(key);
      check<CheckpointError>(shard.numel() == flat.shard_numel(), source, ": '", key, "' has ", shard.numel(),
                             " elements, this rank's shard ", flat.shard_numel(),
                             "; it was written with another model or world size");
      torch::NoGradGuard no_grad;
      flat.shard().copy_(shard.reshape({-1}));
      rest.erase(key);
      continue;
    }
    std::vector<torch::Tensor> pieces;
    for (const auto& entry : flat.entries()) {
      check<CheckpointError>(state.contains(entry.name), source, ": no '", entry.name, "' (a parameter of ",
                             unit->describe(), ")");
      const auto value = state.get_tensor(entry.name);
      check<CheckpointError>(value.sizes().vec() == entry.shape, source, ": '", entry.name, "' has shape ",
                             value.sizes(), ", the model's is ", c10::IntArrayRef(entry.shape));
      pieces.push_back(value.reshape({-1}).to(flat.shard().scalar_type()));
      rest.erase(entry.name);
    }
    flat.load_full_values(torch::cat(pieces));
  }
  // Buffers and parameters outside the units; the units' parameters (released) are checked above.
  auto mismatch = compare_state_dict(module, rest);
  std::set<std::string> sharded_names;
  for (const auto& unit : units_) {
    for (const auto& entry : unit->flat().entries()) sharded_names.insert(entry.name);
  }
  std::erase_if(mismatch.missing, [&](const std::string& name) { return sharded_names.count(name) > 0; });
  check<CheckpointError>(!strict || (mismatch.missing.empty() && mismatch.unexpected.empty()), source,
                         ": the checkpoint does not fit the model:\n", mismatch.describe());
  load_module_state_dict(module, rest, /*strict=*/false, source);
}

StateDict FSDPStrategy::optimizer_state_dict(torch::optim::Optimizer& optimizer, CheckpointLayout layout) {
  auto it = layouts_.find(&optimizer);
  if (layout == CheckpointLayout::Sharded || it == layouts_.end()) {
    return ParallelStrategy::optimizer_state_dict(optimizer, layout);
  }
  return fsdp::consolidate_optimizer_state(optimizer, it->second);
}

void FSDPStrategy::load_optimizer_state_dict(torch::optim::Optimizer& optimizer, const StateDict& state,
                                             CheckpointLayout layout, const std::string& what,
                                             const ParameterNamer& name_of) {
  auto it = layouts_.find(&optimizer);
  if (layout == CheckpointLayout::Sharded || it == layouts_.end()) {
    return ParallelStrategy::load_optimizer_state_dict(optimizer, state, layout, what, name_of);
  }
  fsdp::load_consolidated_optimizer_state(optimizer, it->second, state, what);
}

void register_fsdp_strategy(Registry<Strategy>& registry) {
  registry.add("fsdp",
               "FSDP (ZeRO-3): parameters, gradients and optimizer state sharded; units gather around their "
               "forward and backward",
               FSDPOptions::schema(),
               [](const FSDPOptions& options) { return std::make_shared<FSDPStrategy>(options); });
}

}  // namespace volt

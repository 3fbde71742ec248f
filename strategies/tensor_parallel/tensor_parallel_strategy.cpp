#include "strategies/tensor_parallel/tensor_parallel_strategy.h"

#include "core/error.h"
#include "nn/module_selection.h"
#include "strategies/tensor_parallel/parallel_cross_entropy.h"
#include "strategies/tensor_parallel/parallel_embedding.h"
#include "strategies/tensor_parallel/parallel_linear.h"
#include "strategies/tensor_parallel/tensor_parallel_checkpoint_state.h"

namespace volt {

const OptionSchema<TensorParallelOptions>& TensorParallelOptions::schema() {
  static const auto schema =
      OptionSchema<TensorParallelOptions>("--strategy tensor_parallel")
          .option("tp", &TensorParallelOptions::tp,
                  "ranks per tensor-parallel group (consecutive ranks); must divide the number of processes, whose "
                  "quotient is the number of data-parallel replicas (0: every process)",
                  at_least(int64_t{0}))
          .option("plan", &TensorParallelOptions::plan,
                  "the linears (and embeddings, rowwise) to split, path:colwise or path:rowwise joined by '|' (a path "
                  "component may be *), "
                  "e.g. body.0:colwise|body.2:rowwise")
          .choice("data_parallel", &TensorParallelOptions::data_parallel,
                  {{"ddp", ReplicaDataParallel::DDP}, {"fsdp", ReplicaDataParallel::FSDP}},
                  "how the data-parallel replicas of a rank's slices share them: ddp (each holds them whole, "
                  "gradients averaged) or fsdp (each holds 1/replicas of the parameters, gradients and optimizer "
                  "state, the parameters gathered for each step)")
          .validated_by_what_it_builds();
  return schema;
}

void TensorParallelLayout::add(std::shared_ptr<tp::SplitModule> split) {
  for (const auto& parameter : split->split_parameters())
    split_by_parameter_[parameter.unsafeGetTensorImpl()] = split.get();
  splits_.push_back(std::move(split));
}

void TensorParallelLayout::clear_splits() {
  split_by_parameter_.clear();
  splits_.clear();
}

const tp::SplitModule* TensorParallelLayout::split_of(const torch::Tensor& parameter) const {
  const auto found = split_by_parameter_.find(parameter.unsafeGetTensorImpl());
  if (found == split_by_parameter_.end() || found->second->split_dimension(parameter) < 0) return nullptr;
  return found->second;
}

TensorParallelStrategy::TensorParallelStrategy(TensorParallelOptions options)
    : options_(std::move(options)), gradients_(std::make_shared<TensorParallelGradients>(*this, *this, layout_)) {
  options_.validate();
  plan_ = tp::parse_tensor_parallel_plan(options_.plan);
  hold(gradients_);
  hold(std::make_shared<ReplicaPlacement>(*this, layout_.mesh));
  hold(std::make_shared<TensorParallelCheckpointState>(*this, layout_));
}

void TensorParallelStrategy::check_world_size(int64_t world_size) const {
  model_parallel_size(name(), "tp", options_.tp, world_size);
}

void TensorParallelStrategy::setup_environment(const StrategyEnvironment& environment) {
  ParallelStrategy::setup_environment(environment);
  const int64_t world = communicator().size();
  const int64_t tp = model_parallel_size(name(), "tp", options_.tp, world);
  layout_.mesh =
      ProcessMesh::build(shared_communicator(), {{.name = "dp", .size = world / tp}, {.name = "tp", .size = tp}});
}

const ProcessMesh& TensorParallelStrategy::mesh() const {
  VOLT_INTERNAL_ASSERT(layout_.mesh != nullptr, "tensor_parallel: the mesh is used before setup_environment");
  return *layout_.mesh;
}

Communicator& TensorParallelStrategy::gradient_group() { return mesh().group("dp"); }

void TensorParallelStrategy::wrap_module(torch::nn::Module& module) {
  ParallelStrategy::wrap_module(module);  // every rank starts from rank 0's model, whole
  auto& group = mesh().group("tp");
  const auto style_of = [this](const std::string& path) -> const tp::PlanEntry* {
    for (const auto& entry : plan_) {
      if (tp::path_matches(entry.pattern, path)) return &entry;
    }
    return nullptr;
  };
  const auto selector = ModuleSelector::by_predicate(
      [&](const std::string& path, const torch::nn::Module&) { return style_of(path) != nullptr; },
      "the plan " + options_.plan);
  const auto selected = selector.select(module, "--strategy tensor_parallel:plan", /*required=*/false);
  for (const auto& entry : plan_) {
    bool matched = false;
    for (const auto& s : selected) matched |= tp::path_matches(entry.pattern, s.path);
    check<ConfigurationError>(matched, "--strategy tensor_parallel: plan entry ", tp::to_string(entry),
                              " matches no module; name modules as named_modules() ",
                              "names them (a Linear inside a selected module is not reached)");
  }
  layout_.clear_splits();
  for (const auto& s : selected) {
    const auto& entry = *style_of(s.path);
    const auto style = entry.style;
    std::shared_ptr<tp::SplitModule> split;
    if (auto* linear = dynamic_cast<torch::nn::LinearImpl*>(s.module)) {
      split = std::make_shared<tp::ParallelLinear>(*linear, s.path, style, group, entry.fused);
    } else if (auto* embedding = dynamic_cast<torch::nn::EmbeddingImpl*>(s.module)) {
      check<ConfigurationError>(entry.fused == 1, "--strategy tensor_parallel: ", s.path, " is an Embedding; ",
                                tp::to_string(entry), " fuses projections, which applies to colwise linears only");
      split = std::make_shared<tp::ParallelEmbedding>(*embedding, s.path, style, group);
    }
    check<ConfigurationError>(split != nullptr, "--strategy tensor_parallel: ", s.path, " is a ",
                              module_type_name(*s.module),
                              "; the plan splits torch::nn::Linear and torch::nn::Embedding modules only");
    add_forward_wrapper(*s.module, split);
    wrapped_.emplace_back(s.module, split);
    if (s.sequential != nullptr) {
      if (auto routed = route_sequential_entry(*s.sequential, s.index, *s.module)) routed_.push_back(*routed);
    }
    layout_.add(split);
  }
  calls_before_.clear();
  for (const auto& split : layout_.splits()) calls_before_.push_back(split->calls());
  reach_checked_ = false;
  if (options_.data_parallel == ReplicaDataParallel::FSDP) {
    std::vector<std::pair<std::string, torch::Tensor>> parameters;
    for (const auto& item : module.named_parameters()) parameters.emplace_back(item.key(), item.value());
    layout_.shards = std::make_unique<ReplicaShards>(
        std::move(parameters), mesh().group("dp"), "tp rank " + std::to_string(mesh().coordinate("tp")) + "'s slices");
  }
  gradients_->attach(&module);
  module_ = &module;
}

std::vector<std::shared_ptr<torch::optim::Optimizer>> TensorParallelStrategy::setup_optimizers(
    std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers) {
  if (layout_.shards) {
    layout_.shards->take_optimizers(optimizers, "--strategy tensor_parallel");
  }
  return optimizers;
}

torch::Tensor TensorParallelStrategy::run_step(RunningStage stage, torch::nn::Module& module, const Batch& batch,
                                               const StepFunction& step) {
  torch::Tensor loss;
  if (layout_.shards) layout_.shards->gather();  // kept until the gradients are reduced
  try {
    ScopeGuard active = tp::ActiveTensorParallelGroup::activate(mesh().group("tp"));
    loss = ParallelStrategy::run_step(stage, module, batch, step);
  } catch (const c10::Error& error) {
    // A planned linear called directly runs its slice as if it were whole, which usually fails in
    // a later operation's shapes: say which module, not just the shapes.
    check_split_forwards_ran(std::string(" (the step failed: ") + error.what_without_backtrace() + ")");
    throw;
  }
  if (stage == RunningStage::Training && !reach_checked_) {
    reach_checked_ = true;
    check_split_forwards_ran("");
  }
  return loss;
}

void TensorParallelStrategy::check_split_forwards_ran(const std::string& failure) const {
  for (size_t i = 0; i < layout_.splits().size(); ++i) {
    const auto& split = *layout_.splits()[i];
    check<ConfigurationError>(split.calls() > calls_before_[i], "--strategy tensor_parallel: the plan splits ",
                              split.path(), ", but the step's forward did not run it split: call it through ",
                              "volt::call(", split.path(), ", x) or as an entry of a Sequential (LibTorch has no ",
                              "forward hooks: a direct ->forward(x) runs its slice as if it were whole)", failure);
  }
}

void TensorParallelStrategy::restore_module(torch::nn::Module& module) {
  if (layout_.shards) {
    layout_.shards->restore();
    layout_.shards.reset();
  }
  for (const auto& split : layout_.splits()) split->restore();
}

void TensorParallelStrategy::teardown() {
  gradients_->attach(nullptr);
  module_ = nullptr;
  for (auto it = routed_.rbegin(); it != routed_.rend(); ++it) restore_sequential_entry(*it);
  routed_.clear();
  for (auto& [module, wrapper] : wrapped_) remove_forward_wrapper(*module, *wrapper);
  wrapped_.clear();
  layout_.clear_splits();
  layout_.shards.reset();
  ParallelStrategy::teardown();
}

std::map<std::string, double> TensorParallelStrategy::metrics() const {
  auto values = ParallelStrategy::metrics();
  if (module_ != nullptr) {
    int64_t bytes = 0;
    for (const auto& p : layout_.shards ? layout_.shards->flat().stepped_tensors() : module_->parameters())
      bytes += p.numel() * static_cast<int64_t>(p.element_size());
    values["tensor_parallel/parameter_bytes"] = static_cast<double>(bytes);
  }
  return values;
}

void register_tensor_parallel_strategy(Registry<Strategy>& registry) {
  registry.add("tensor_parallel",
               "tensor parallelism: the plan's linears split column- or row-wise across a tp group, data parallel "
               "across groups (ddp or fsdp)",
               TensorParallelOptions::schema(),
               [](const TensorParallelOptions& options) { return std::make_shared<TensorParallelStrategy>(options); });
}

}  // namespace volt

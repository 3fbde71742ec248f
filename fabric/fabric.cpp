#include "fabric/fabric.h"

#include <optional>

#include "checkpoint/module_state.h"
#include "checkpoint/optimizer_state.h"
#include "core/collective_site.h"
#include "core/error.h"
#include "core/reproducibility.h"
#include "distributed/process_launcher.h"
#include "run/checkpoint_header.h"
#include "run/optim/fused_adamw.h"
#include "strategies/loaded_checkpoint.h"

namespace volt {

Fabric::Fabric(FabricOptions options) : Fabric(std::move(options), TrainerComponents{}) {}

Fabric::Fabric(FabricOptions options, ProcessLauncher& launcher)
    : Fabric(std::move(options), TrainerComponents{nullptr, nullptr, &launcher}) {}

Fabric::Fabric(FabricOptions options, TrainerComponents components) : options_(std::move(options)) {
  options_.validate();
  // Seeded now, so that a model built after the Fabric starts from weights the seed decides.
  if (options_.seed) seed_everything(*options_.seed);
  placement_ = resolve_run(options_, std::move(components), "Fabric");
  strategy_ = placement_.strategy;
}

Fabric::~Fabric() {
  if (strategy_) strategy_->teardown();
}

void Fabric::launch() {
  // setup needs a launched Fabric, so a launch after setup is a second launch: this one message.
  check<ConfigurationError>(!launched_, "Fabric::launch: already launched; call it once, before setup");
  setup_run_environment(*strategy_, placement_, options_);
  launched_ = true;
  // As the Trainer seeds before each run: a model built after launch starts from the same weights
  // on every rank (setup broadcasts rank 0's anyway).
  if (options_.seed) seed_everything(*options_.seed);
  set_deterministic(options_.deterministic);
}

void Fabric::require_launched(const char* call) const {
  check<ConfigurationError>(launched_, "Fabric::", call,
                            ": the Fabric is not launched; call fabric.launch() first "
                            "(it starts or joins the processes and sets up the strategy)");
}

void Fabric::require_set_up(const char* call) const {
  require_launched(call);
  require_not_unwrapped(call);
  check<ConfigurationError>(module_ != nullptr && !optimizers_.empty(), "Fabric::", call,
                            ": no model and optimizer are set up; call fabric.setup(model, optimizer) first and use "
                            "the module and optimizer it returns");
}

void Fabric::require_not_unwrapped(const char* call) const {
  check<ConfigurationError>(!unwrapped_, "Fabric::", call,
                            ": the loop has ended (unwrap_module gave the model back "
                            "whole and the strategy no longer drives it); call ",
                            call, " before fabric.unwrap_module(), or save the whole model with volt::save_weights");
}

void Fabric::unwrap_module() {
  require_launched("unwrap_module");
  require_not_unwrapped("unwrap_module");
  check<ConfigurationError>(module_ != nullptr,
                            "Fabric::unwrap_module: no module is set up; call "
                            "fabric.setup(model, optimizer) first");
  strategy_->finish_checkpoint_writes();  // the loop's end, as the Trainer's run ends
  strategy_->restore_module(*module_);
  strategy_->detach_policies();
  unwrapped_ = true;
}

void Fabric::finish_checkpoint_writes() {
  require_launched("finish_checkpoint_writes");
  strategy_->finish_checkpoint_writes();
}

void Fabric::set_up_module(const std::shared_ptr<torch::nn::Module>& module) {
  require_launched("setup_module");
  check<ConfigurationError>(module != nullptr, "Fabric::setup_module: expected a module, got nullptr");
  check<ConfigurationError>(module_ == nullptr,
                            "Fabric::setup_module: a module is already set up; one Fabric sets "
                            "up one model (its strategy wraps one module): put the parts in one module, or use a "
                            "Fabric per model");
  strategy_->setup_module(*module);
  module_ = module;
}

std::vector<std::shared_ptr<torch::optim::Optimizer>> Fabric::setup_optimizers(
    std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers) {
  require_launched("setup_optimizers");
  check<ConfigurationError>(module_ != nullptr,
                            "Fabric::setup_optimizers: no module is set up; call "
                            "fabric.setup_module(model) first, or fabric.setup(model, optimizer)");
  check<ConfigurationError>(optimizers_.empty(),
                            "Fabric::setup_optimizers: optimizers are already set up; pass "
                            "every optimizer in one call");
  check<ConfigurationError>(!optimizers.empty(), "Fabric::setup_optimizers: expected at least one optimizer, got none");
  std::set<const void*> parameters;
  for (const auto& p : module_->parameters()) parameters.insert(p.unsafeGetTensorImpl());
  for (size_t i = 0; i < optimizers.size(); ++i) {
    check<ConfigurationError>(optimizers[i] != nullptr, "Fabric::setup_optimizers: optimizer ", i, " is nullptr");
    for (const auto& group : optimizers[i]->param_groups()) {
      for (const auto& p : group.params()) {
        check<ConfigurationError>(parameters.count(p.unsafeGetTensorImpl()) != 0,
                                  "Fabric::setup_optimizers: optimizer ", i,
                                  " holds a tensor that is not a parameter of the module set up; build it over "
                                  "model->parameters() of the model given to setup");
      }
    }
  }
  given_optimizers_ = optimizers;
  optimizers_ = strategy_->setup_optimizers(std::move(optimizers));
  VOLT_INTERNAL_ASSERT(optimizers_.size() == given_optimizers_.size(),
                       "a strategy returns one optimizer for each it is given");
  return optimizers_;
}

std::shared_ptr<FabricDataLoader> Fabric::setup_dataloader(std::shared_ptr<DataLoader> loader, BatchLimit limit,
                                                           RunningStage stage) {
  require_launched("setup_dataloader");
  check<ConfigurationError>(loader != nullptr, "Fabric::setup_dataloader: expected a loader, got nullptr");
  auto distributed =
      strategy_->placement().distribute_loader(DataLoader::with_default_seed(loader, options_.seed.value_or(0)), stage);
  return std::make_shared<FabricDataLoader>(std::move(distributed), limit, strategy_, position_);
}

AccumulationStep Fabric::accumulate(int64_t micro_batches) {
  require_set_up("accumulate");
  check<ConfigurationError>(micro_batches >= 1, "Fabric::accumulate: expected micro-batches per step >= 1, got ",
                            micro_batches);
  check<ConfigurationError>(position_->batch_idx >= 0,
                            "Fabric::accumulate: no batch was drawn from a loader of "
                            "fabric.setup_dataloader yet, so the window is unknown; draw the batch first "
                            "(loader->batch(i)), or count windows yourself and use fabric.no_sync()");
  const auto window = accumulation_window(position_->batch_idx, position_->num_batches, micro_batches);
  return AccumulationStep(window, window.closes() ? ScopeGuard{} : no_sync());
}

ScopeGuard Fabric::no_sync() {
  require_set_up("no_sync");
  // ScopeGuard takes a copyable action: the strategy's move-only region is shared into it.
  auto region = std::make_shared<std::optional<ScopeGuard>>(strategy_->gradients().no_sync());
  ++open_no_sync_;
  return ScopeGuard([this, region] {
    region->reset();
    --open_no_sync_;
  });
}

ScopeGuard Fabric::autocast() {
  require_launched("autocast");
  return precision().forward_context();
}

void Fabric::backward(const torch::Tensor& loss) {
  require_set_up("backward");
  check<ConfigurationError>(loss.defined() && loss.numel() == 1, "Fabric::backward: expected a scalar loss, got ",
                            loss.defined() ? c10::str(loss.sizes()) : std::string("an undefined tensor"));
  check<ConfigurationError>(loss.requires_grad(),
                            "Fabric::backward: the loss does not require grad; compute it "
                            "from the module's forward (module->forward(...)) on the module setup returned");
  strategy_->backward(loss);
  // Inside no_sync the gradients stay this rank's; a backward outside it synchronizes them all.
  gradients_unsynchronized_ = open_no_sync_ > 0;
}

torch::optim::Optimizer& Fabric::stepped_optimizer(torch::optim::Optimizer& optimizer, const char* call) const {
  require_set_up(call);
  for (size_t i = 0; i < optimizers_.size(); ++i) {
    if (optimizers_[i].get() == &optimizer) return optimizer;
  }
  for (size_t i = 0; i < given_optimizers_.size(); ++i) {
    check<ConfigurationError>(given_optimizers_[i].get() != &optimizer, "Fabric::", call, ": strategy '",
                              strategy_->name(), "' steps its own wrapper of this optimizer (", i,
                              "); use the optimizer fabric.setup returned");
  }
  throw ConfigurationError(std::string("Fabric::") + call +
                           ": this optimizer was not set up; pass it through "
                           "fabric.setup(model, optimizer) and use the one it returns");
}

torch::Tensor Fabric::clip_gradients(torch::optim::Optimizer& optimizer, double max_norm, double norm_type) {
  auto& stepped = stepped_optimizer(optimizer, "clip_gradients");
  check<ConfigurationError>(max_norm > 0, "Fabric::clip_gradients: expected max_norm > 0, got ", max_norm);
  return strategy_->clip_gradients_norm(stepped, max_norm, norm_type);
}

void Fabric::clip_gradients_value(torch::optim::Optimizer& optimizer, double clip_value) {
  auto& stepped = stepped_optimizer(optimizer, "clip_gradients_value");
  check<ConfigurationError>(clip_value > 0, "Fabric::clip_gradients_value: expected clip_value > 0, got ", clip_value);
  strategy_->clip_gradients_value(stepped, clip_value);
}

bool Fabric::step(torch::optim::Optimizer& optimizer) {
  auto& stepped = stepped_optimizer(optimizer, "step");
  check<ConfigurationError>(open_no_sync_ == 0,
                            "Fabric::step: inside a no_sync region, where the gradients of this "
                            "rank were not synchronized; step only when step.syncing() (fabric.accumulate), after "
                            "the region ends");
  check<ConfigurationError>(stepped_in_this_step_.insert(&stepped).second,
                            "Fabric::step: this optimizer already "
                            "stepped in this step; step each optimizer setup returned once per step");
  if (gradients_unsynchronized_) {
    // Note [A window that closes without backward], as the Trainer handles it: the window's
    // closing micro-batch ran no backward, so the strategy synchronizes what the earlier ones
    // accumulated under no_sync before any rank steps on it. [collective]
    strategy_->gradients().synchronize_accumulated_gradients(*module_);
    gradients_unsynchronized_ = false;
  }
  const bool took = strategy_->optimizer_step(stepped, nullptr);
  last_step_skipped_ = !took;
  if (!took) ++skipped_steps_;
  if (stepped_in_this_step_.size() == optimizers_.size()) {
    stepped_in_this_step_.clear();
    ++global_step_;
    strategy_->after_optimizer_steps(global_step_);
  }
  return took;
}

CapturedStep Fabric::captured_step(CapturedStep::Step step) {
  require_set_up("captured_step");
  check<ConfigurationError>(!optimizers_.empty(),
                            "Fabric::captured_step: no optimizer was set up; call setup with the "
                            "optimizers the step steps first");
  std::shared_ptr<CapturableRun> run;
  if (options_.cuda_graph) {
    run = capturable_run_.lock();
    if (!run) {
      run = std::make_shared<CapturableRun>(*strategy_, /*automatic_optimization=*/true, optimizers_);
      capturable_run_ = run;
    }
  }
  return CapturedStep(*this, std::move(step), std::move(run));
}

void Fabric::zero_grad(torch::optim::Optimizer& optimizer) {
  strategy_->gradients().zero_grad(stepped_optimizer(optimizer, "zero_grad"));
}

torch::Tensor Fabric::all_reduce(const torch::Tensor& value, ReduceOp op) {
  require_launched("all_reduce");
  const CollectiveSite site("Fabric::all_reduce");
  return strategy_->collectives().all_reduce(value, op);
}

torch::Tensor Fabric::broadcast(const torch::Tensor& value, int64_t root) {
  require_launched("broadcast");
  const CollectiveSite site("Fabric::broadcast");
  return strategy_->collectives().broadcast(value, root);
}

bool Fabric::broadcast(bool decision, std::source_location site) {
  require_launched("broadcast");
  return strategy_->collectives().broadcast_decision(decision, site);
}

void Fabric::barrier(const std::string& name) {
  require_launched("barrier");
  const CollectiveSite site("Fabric::barrier" + (name.empty() ? std::string() : "(" + name + ")"));
  strategy_->collectives().barrier(name);
}

torch::nn::Module& Fabric::unwrapped(torch::nn::Module& module) {
  if (auto* wrapper = dynamic_cast<FabricModuleBase*>(&module)) return wrapper->inner();
  return module;
}

// Note [What a Fabric checkpoint holds]: the header every volt checkpoint has
// (checkpoint_header.h), then "writer": "fabric", "global_step", "items" {name: "module" |
// "optimizer" | "value"}, "state" {name: the module's state dict | the optimizer's state | the
// value}, "strategy" {"name", "world_size", "state"} and "precision" {"name", "state"}, the last
// two as the Trainer writes them.
void Fabric::save(const std::filesystem::path& path, const CheckpointItems& items, bool in_background) {
  require_launched("save");
  require_not_unwrapped("save");
  const CollectiveSite site("Fabric::save");
  const auto layout = strategy_->checkpointing().layout();
  StateDict checkpoint = checkpoint_header(*strategy_, layout);
  checkpoint.set("writer", std::string("fabric"));
  checkpoint.set("global_step", global_step_);
  StateDict kinds, state;
  for (const auto& [name, item] : items) {
    switch (item.kind()) {
      case CheckpointItem::Kind::Module:
        check<ConfigurationError>(item.module() != nullptr, "Fabric::save: item '", name, "' is a null module");
        kinds.set(name, std::string("module"));
        state.set(name, strategy_->checkpointing().model_state_dict(unwrapped(*item.module()), layout));
        break;
      case CheckpointItem::Kind::Optimizer: {
        check<ConfigurationError>(item.optimizer() != nullptr, "Fabric::save: item '", name, "' is a null optimizer");
        kinds.set(name, std::string("optimizer"));
        auto& optimizer = stepped_optimizer(*item.optimizer(), "save");
        prepare_optimizer_state_for_save(optimizer);
        state.set(name, strategy_->checkpointing().optimizer_state_dict(optimizer, layout));
        break;
      }
      case CheckpointItem::Kind::Value:
        kinds.set(name, std::string("value"));
        state.set(name, item.value());
        break;
    }
  }
  checkpoint.set("items", kinds);
  checkpoint.set("state", state);
  StateDict strategy_section;
  strategy_section.set("name", strategy_->name());
  strategy_section.set("world_size", world_size());
  strategy_section.set("state", strategy_->checkpointing().strategy_state_dict(layout));
  checkpoint.set("strategy", strategy_section);
  StateDict precision_section;
  precision_section.set("name", precision().name());
  precision_section.set("state", precision().state_dict());
  checkpoint.set("precision", precision_section);
  strategy_->save_checkpoint(checkpoint, path, in_background);
}

StateDict Fabric::load(const std::filesystem::path& path, const CheckpointItems& items, bool strict) {
  require_launched("load");
  require_not_unwrapped("load");
  const std::string source = "checkpoint '" + path.string() + "'";
  const LoadedCheckpoint loaded = strategy_->load_checkpoint(path);
  const StateDict& checkpoint = loaded.state;
  check_checkpoint_readable(checkpoint, *strategy_, source);
  check<CheckpointError>(checkpoint.contains("writer") && checkpoint.get_string("writer") == "fabric", source,
                         " was not written by Fabric::save (a Trainer checkpoint holds its model under "
                         "'state_dict': load it with the Trainer, or its weights with load_weights)");
  const auto layout = checkpoint_layout_of(checkpoint);
  const StateDict state = checkpoint.child("state");
  for (const auto& [name, item] : items) {
    check<CheckpointError>(state.contains(name), source, " holds no item '", name, "'; it holds: ", [&] {
      std::string keys;
      for (const auto& key : state.keys()) keys += (keys.empty() ? "" : ", ") + key;
      return keys;
    }());
    switch (item.kind()) {
      case CheckpointItem::Kind::Module:
        check<ConfigurationError>(item.module() != nullptr, "Fabric::load: item '", name, "' is a null module");
        strategy_->checkpointing().load_model_state_dict(unwrapped(*item.module()), state.child(name), layout, strict,
                                                         source + ", item '" + name + "'", loaded.slices.get());
        break;
      case CheckpointItem::Kind::Optimizer: {
        check<ConfigurationError>(item.optimizer() != nullptr, "Fabric::load: item '", name, "' is a null optimizer");
        const ParameterNamer name_of = module_ ? parameter_namer(*module_) : ParameterNamer{};
        strategy_->checkpointing().load_optimizer_state_dict(
            stepped_optimizer(*item.optimizer(), "load"), state.child(name), layout, source + ", item '" + name + "'",
            name_of, loaded.slices.get());
        break;
      }
      case CheckpointItem::Kind::Value: break;  // read from the returned section
    }
  }
  const auto precision_section = checkpoint.child("precision");
  if (precision_section.get_string("name") == precision().name()) {
    precision().load_state_dict(precision_section.child("state"));
  }
  const auto strategy_section = checkpoint.child("strategy");
  if (strategy_section.get_string("name") == strategy_->name()) {
    strategy_->checkpointing().load_strategy_state_dict(strategy_section.child("state"), layout);
  }
  global_step_ = checkpoint.get_int("global_step");
  return state;
}

}  // namespace volt

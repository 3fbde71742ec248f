#pragma once
// volt::Fabric — the Trainer's strategies, precision and checkpoints for a loop the user writes
// (docs/fabric.md). The user keeps the loop; the Fabric resolves the run exactly as the
// Trainer does (run_setup.h: cluster environment, strategy by name, device, launcher, precision)
// and hands every step to the same Strategy the Trainer would drive:
//
//   volt::Fabric fabric({.strategy = "ddp", .devices = 2, .precision = "bf16-mixed"});
//   fabric.launch();                                        // process group; volt's launcher starts ranks
//   auto [module, optimizer] = fabric.setup(model, std::make_shared<torch::optim::AdamW>(model->parameters()));
//   auto loader = fabric.setup_dataloader(train_loader);    // this rank's share, batches on the device
//   for (int64_t i = 0; i < loader->num_batches(); ++i) {
//     auto batch = loader->batch(i);
//     auto step = fabric.accumulate(4);                     // no_sync on 3 of every 4 micro-batches
//     auto loss = criterion(module->forward(batch.input), batch.target) / step.window_size();
//     fabric.backward(loss);
//     if (step.syncing()) {
//       fabric.clip_gradients(*optimizer, 1.0);
//       fabric.step(*optimizer);
//       fabric.zero_grad(*optimizer);
//     }
//   }
//   fabric.save("run.ckpt", {{"model", model}, {"optimizer", optimizer}});
//
// Order: launch, then setup (or setup_module then setup_optimizers), setup_dataloader, then the
// loop, then (optionally) unwrap_module; each out of order is a ConfigurationError that says what to call first. One
// Fabric sets up one module (a strategy wraps one). A Fabric is used on one thread; methods marked [collective] must be
// called by every rank at the same point.
#include <torch/torch.h>

#include <filesystem>
#include <iostream>
#include <memory>
#include <set>
#include <source_location>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/scope_guard.h"
#include "data/data_loader.h"
#include "distributed/reduce_op.h"
#include "strategies/strategy.h"
#include "fabric/captured_step.h"
#include "fabric/checkpoint_item.h"
#include "fabric/fabric_data_loader.h"
#include "fabric/fabric_module.h"
#include "fabric/fabric_options.h"
#include "run/accumulation_window.h"
#include "run/run_setup.h"

namespace volt {

// One micro-batch's place in its accumulation window (Fabric::accumulate), holding the
// strategy's no_sync region while the micro-batch does not close its window. Keep it alive until
// backward has run. Move-only.
class AccumulationStep {
 public:
  AccumulationStep(AccumulationWindow window, ScopeGuard no_sync) : window_(window), no_sync_(std::move(no_sync)) {}
  // Whether this micro-batch closes its window: its backward synchronizes, and the optimizer
  // steps after it.
  bool syncing() const { return window_.closes(); }
  // Micro-batches in this window (the last window of an epoch may be shorter): what the Trainer
  // divides each micro-batch's loss by.
  int64_t window_size() const { return window_.size; }
  int64_t position() const { return window_.position; }

 private:
  AccumulationWindow window_;
  ScopeGuard no_sync_;
};

class Fabric {
 public:
  // Validates the options and resolves every name now (strategy, precision, cluster, device), so
  // that a bad setting fails here: an unknown strategy lists the registered ones.
  explicit Fabric(FabricOptions options = {});
  // Starts local ranks, when it must, through run_main's `launcher` (run_main(body(launcher))),
  // which then ends only after them.
  Fabric(FabricOptions options, ProcessLauncher& launcher);
  // A strategy and/or precision built in code (the given precision must be the one
  // options.precision names), and/or run_main's launcher.
  Fabric(FabricOptions options, TrainerComponents components);
  ~Fabric();
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;

  // Joins the run's processes, starting them first where this process must (volt's launcher, as
  // the Trainer does: the other local ranks run this program from the start), and sets up the
  // strategy's process group. Once, before setup. [collective]
  void launch();
  bool launched() const { return launched_; }

  // ---- setup
  // setup_module then setup_optimizers: returns the module to call forward on and the optimizer to
  // step (the strategy's wrapper, e.g. a sharded OSS, or `optimizer` itself). Build the optimizer
  // over model->parameters(): setup keeps the parameter tensors (the strategy converts and moves
  // them in place). [collective]
  template <typename M, typename O>
    requires std::derived_from<O, torch::optim::Optimizer>
  std::pair<std::shared_ptr<FabricModule<M>>, std::shared_ptr<torch::optim::Optimizer>> setup(
      std::shared_ptr<M> module, std::shared_ptr<O> optimizer) {
    auto wrapped = setup_module(std::move(module));
    return {wrapped, setup_optimizers({std::move(optimizer)}).front()};
  }
  template <typename M>
  std::pair<std::shared_ptr<FabricModule<M>>, std::vector<std::shared_ptr<torch::optim::Optimizer>>> setup(
      std::shared_ptr<M> module, std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers) {
    auto wrapped = setup_module(std::move(module));
    return {wrapped, setup_optimizers(std::move(optimizers))};
  }
  // Through the precision, to the device, then wrapped (broadcast from rank 0, reducer, shards):
  // Strategy::setup_module. Once per Fabric. [collective]
  template <typename M>
  std::shared_ptr<FabricModule<M>> setup_module(std::shared_ptr<M> module) {
    set_up_module(module);
    return std::make_shared<FabricModule<M>>(std::move(module), strategy_);
  }
  // The optimizers to step: the given ones or the strategy's wrappers (Strategy::setup_optimizers),
  // in order. Once, after setup_module; every optimizer's parameters must be the module's. [collective]
  std::vector<std::shared_ptr<torch::optim::Optimizer>> setup_optimizers(
      std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers);
  // This rank's share of `loader` for `stage` (Placement::distribute_loader), seeded by
  // options.seed unless the loader has its own seed; `limit` of its batches an epoch (the
  // Trainer's --limit-train-batches: BatchLimit::count(20), BatchLimit::fraction(0.1)).
  std::shared_ptr<FabricDataLoader> setup_dataloader(std::shared_ptr<DataLoader> loader,
                                                     BatchLimit limit = BatchLimit::fraction(1.0),
                                                     RunningStage stage = RunningStage::Training);

  // ---- one step
  // The micro-batch last drawn from a FabricDataLoader in its window of `micro_batches`
  // (accumulation_window, as the Trainer counts: consecutive windows from the epoch's first batch, the
  // loader's last batch closing the last, shorter one). Unless it closes its window, the returned
  // step holds the strategy's no_sync region: backward accumulates without communicating.
  AccumulationStep accumulate(int64_t micro_batches);
  // The strategy's no_sync region, for loops that count windows themselves: backward inside it
  // accumulates locally; the first backward outside it synchronizes everything accumulated.
  ScopeGuard no_sync();
  // The precision's autocast region (none for *-true), for code beyond the forward that should run
  // as the Trainer runs training_step: e.g. the loss, so that a loop matches the Trainer bit for
  // bit under *-mixed (module->forward enters it by itself; nesting is fine).
  ScopeGuard autocast();
  // Strategy::backward: the precision's loss scaling (16-mixed) and the strategy's gradient
  // synchronization (DDP's reducer, ShardedDDP's reduce to owners). Divides nothing: the loop
  // decides what a micro-batch's loss is. [collective outside no_sync for distributed strategies]
  void backward(const torch::Tensor& loss);
  // Unscales `optimizer`'s gradients (the precision) and clips them to a total norm of `max_norm`
  // (a sharded optimizer over every rank's shard); returns the norm before clipping, a 0-dim tensor
  // on the gradients' device (read it with .item() when needed: that waits for the device). Call it
  // after the window's last backward and before step. [collective for sharded optimizers and 16-mixed]
  torch::Tensor clip_gradients(torch::optim::Optimizer& optimizer, double max_norm, double norm_type = 2.0);
  void clip_gradients_value(torch::optim::Optimizer& optimizer, double clip_value);
  // Strategy::optimizer_step (unscale, the precision's step, which a GradScaler skips on inf/NaN
  // gradients); once every set-up optimizer stepped in this step, counts a global step and runs
  // Strategy::after_optimizer_steps (the GradScaler's update; post-local-SGD's and SlowMo's model
  // averaging). A window whose last backward ran under no_sync (its closing micro-batch ran
  // none) has its gradients synchronized by the strategy first, as the Trainer does (Note [A
  // window that closes without backward]). Returns whether the optimizer stepped (false: skipped,
  // counted in skipped_steps()). Throws ConfigurationError inside a no_sync region (the gradients are not
  // synchronized) or for an optimizer setup_optimizers did not return. [collective for strategies
  // that average models, sharded optimizers and 16-mixed]
  bool step(torch::optim::Optimizer& optimizer);
  // GradientSynchronization::zero_grad: drops the gradients, or zeroes them in place where they
  // are views into the strategy's buffers (ddp:gradient_as_bucket_view=true, where optimizer->zero_grad() would
  // detach them).
  void zero_grad(torch::optim::Optimizer& optimizer);
  // Steps taken so far (each counted once all set-up optimizers stepped), skipped ones included.
  int64_t global_step() const { return global_step_; }
  // Optimizer steps the precision skipped (a GradScaler that found inf/NaN gradients).
  int64_t skipped_steps() const { return skipped_steps_; }
  bool last_step_skipped() const { return last_step_skipped_; }

  // ---- the end of the loop
  // Gives the model back whole, as the user built it (Strategy::restore_module, what the Trainer
  // does when a run ends: fsdp gathers every unit into the module's own tensors and puts
  // auto-wrapped entries back; other strategies leave the model as it is), so that it can be
  // saved with volt::save_weights or used on its own. It ends the loop: accumulate, no_sync,
  // backward, clip, step, zero_grad, save and load are ConfigurationErrors afterwards (a sharded
  // optimizer steps shards that no longer feed the model); the FabricModule still runs forward.
  // Once, after setup. [collective]
  void unwrap_module();

  // ---- who am I, and collectives for the loop (the strategy's)
  int64_t global_rank() const { return strategy_->topology().global_rank; }
  int64_t local_rank() const { return strategy_->topology().local_rank; }
  int64_t world_size() const { return strategy_->topology().world_size; }
  bool is_global_zero() const { return strategy_->is_global_zero(); }
  torch::Device device() const { return placement_.device; }
  torch::Tensor all_reduce(const torch::Tensor& value, ReduceOp op = ReduceOp::Mean);  // [collective]
  torch::Tensor broadcast(const torch::Tensor& value, int64_t root = 0);               // [collective]
  // Rank 0's decision on every rank; ranks at different calls fail (Note [Which decision]).
  bool broadcast(bool decision, std::source_location site = std::source_location::current());  // [collective]
  void barrier(const std::string& name = "");                                          // [collective]
  // One line on stdout from global rank 0 only (written at once, so lines of several processes
  // sharing a terminal do not interleave).
  template <typename... Args>
  void print(const Args&... args) const {
    if (!is_global_zero()) return;
    std::ostringstream line;
    (line << ... << args);
    line << '\n';
    std::cout << line.str() << std::flush;
  }

  // A step of the user's loop that options().cuda_graph captures and replays (captured_step.h):
  // each call runs `step` on a batch. Throws NotSupportedError with cuda_graph for what cannot be
  // captured (CapturableRun::check_supported), ConfigurationError before setup.
  CapturedStep captured_step(CapturedStep::Step step);
  // ---- checkpoints: the Trainer's file format, atomic and checksummed, in the strategy's layout
  // (one full file written by rank 0, or a directory of per-rank shards). Besides the items it
  // holds the strategy's own section (comm-hook state, averager step), the precision's state (the
  // GradScaler's scale) and global_step(). Modules may be given as the user's module or the
  // FabricModule; optimizers as the one setup returned or the one given to it. With
  // `in_background` it returns once a snapshot is taken and a thread writes it (Note [Checkpoints
  // written in the background]): the next save or load, unwrap_module() or
  // finish_checkpoint_writes() waits for it and says whether it succeeded. [collective]
  void save(const std::filesystem::path& path, const CheckpointItems& items, bool in_background = false);
  // Waits for a checkpoint written in the background; throws CheckpointError on every rank when
  // it failed on any. [collective]
  void finish_checkpoint_writes();
  // Restores `items` in place from a checkpoint save wrote (any world size for a full one), plus
  // the strategy's section, the precision's state and global_step(); returns the items' section
  // (plain values are read from it). Throws CheckpointError for a missing item, a damaged file,
  // or a sharded checkpoint of another strategy or world size. [collective]
  StateDict load(const std::filesystem::path& path, const CheckpointItems& items, bool strict = true);

  Strategy& strategy() const { return *strategy_; }
  Precision& precision() const { return placement_.strategy->precision(); }
  const ClusterEnvironment& cluster_environment() const { return *placement_.cluster; }
  const FabricOptions& options() const { return options_; }

 private:
  void set_up_module(const std::shared_ptr<torch::nn::Module>& module);
  // Throws ConfigurationError naming `call` unless launch() (and, with `needs_module`, setup)
  // ran.
  void require_launched(const char* call) const;
  void require_set_up(const char* call) const;
  void require_not_unwrapped(const char* call) const;  // ConfigurationError after unwrap_module
  // The optimizer the strategy steps for `optimizer` (the given one or its wrapper); throws
  // ConfigurationError for one that was not set up.
  torch::optim::Optimizer& stepped_optimizer(torch::optim::Optimizer& optimizer, const char* call) const;
  // A replayed CapturedStep's optimizer steps, which the host code that counts them did not run.
  friend class CapturedStep;
  void advance_global_step(int64_t by) { global_step_ += by; }
  // The user's module behind `module` (a FabricModule's inner module, or `module` itself).
  static torch::nn::Module& unwrapped(torch::nn::Module& module);

  FabricOptions options_;
  RunPlacement placement_;
  std::shared_ptr<Strategy> strategy_;
  bool launched_ = false;
  bool unwrapped_ = false;  // unwrap_module ran: the loop is over
  std::shared_ptr<torch::nn::Module> module_;  // the user's module, once set up
  // The optimizers as given to setup_optimizers and as the strategy steps them, by index.
  std::vector<std::shared_ptr<torch::optim::Optimizer>> given_optimizers_, optimizers_;
  std::set<const torch::optim::Optimizer*> stepped_in_this_step_;
  std::shared_ptr<LoaderPosition> position_ = std::make_shared<LoaderPosition>();
  int64_t open_no_sync_ = 0;
  // The last backward ran inside no_sync: step() synchronizes first (a window closed without
  // backward).
  bool gradients_unsynchronized_ = false;
  int64_t global_step_ = 0;
  int64_t skipped_steps_ = 0;
  std::weak_ptr<CapturableRun> capturable_run_;  // shared by the CapturedSteps alive
  bool last_step_skipped_ = false;
};

}  // namespace volt

#pragma once
// What a run resolves from its options before it trains, the same way for the Trainer and for the
// Fabric (a user's own loop): the cluster environment, the strategy (by name, through the
// registry), this process's device, who starts the local ranks, and the precision the strategy
// holds; and, once, the strategy's environment (process group, CPU threads) on top of that.
// Everything about processes is decided at construction, so that a mismatch fails there, not
// mid-run.
#include <torch/torch.h>

#include <memory>
#include <string>

#include "core/cpu_threads.h"
#include "distributed/cluster/cluster_environment.h"
#include "precision/precision.h"
#include "run/run_options.h"
#include "strategies/strategy.h"

namespace volt {

class ProcessLauncher;

// What a Trainer (or a Fabric) is given in code instead of resolving it from its options.
struct TrainerComponents {
  std::shared_ptr<Strategy> strategy;  // null: options.strategy, resolved through the registry
  // Null: options.precision. Given, it must be the precision options.precision names (e.g. a
  // MixedPrecision with its own GradScaler).
  std::shared_ptr<Precision> precision;
  // Starts the other local ranks when this process must (volt's launcher); owned by the caller,
  // who keeps it alive as long as the Trainer (run_main's launcher). Null: the Trainer owns one.
  ProcessLauncher* launcher = nullptr;
};

// The resolved pieces. Movable, not copyable (it may own the launcher, declared first so that it
// outlives the strategy: its destructor waits for the ranks it started, as the Trainer's does).
struct RunPlacement {
  std::unique_ptr<ProcessLauncher> owned_launcher;
  ProcessLauncher* launcher = nullptr;  // the caller's, or owned_launcher's
  std::shared_ptr<const ClusterEnvironment> cluster;
  torch::Device device = torch::kCPU;               // cuda:<local rank> or the CPU (device_choice.h)
  std::vector<torch::Device> devices{torch::kCPU};  // every device this process drives, `device` first
  std::shared_ptr<Strategy> strategy;               // holding the precision

  RunPlacement();
  RunPlacement(RunPlacement&&) noexcept;
  RunPlacement& operator=(RunPlacement&&) noexcept;
  ~RunPlacement();
};

// Resolves `options` (validated by the caller) and `components` into a placement: the strategy
// first (unless "auto"), whose devices_per_process sets how many processes a node runs, then the
// cluster environment, then this process's devices. `who` ("Trainer",
// "Fabric") names the caller in errors. Throws ConfigurationError for an unknown strategy or
// precision, a strategy that cannot run the cluster's number of processes, or a given precision
// that is not the one options.precision names.
RunPlacement resolve_run(const RunOptions& options, TrainerComponents components, const std::string& who);

// Sets up the strategy's environment: the current device, CPU threads, malloc tuning, then
// Strategy::setup_environment (process group; volt's launcher starts the other local ranks
// there). Returns the CPU threads in effect. `diagnostics_directory`: where a hang report leaves
// each rank's last collectives (Note [Diagnosing a hang]). [collective]
CPUThreads setup_run_environment(Strategy& strategy, const RunPlacement& placement, const RunOptions& options,
                                 const std::string& diagnostics_directory = ".");

}  // namespace volt

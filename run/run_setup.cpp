#include "run/run_setup.h"

#include "core/cpu_threads.h"
#include "core/malloc_tuning.h"
#include "core/option_spec.h"
#include "distributed/process_launcher.h"
#include "run/device_choice.h"
#include "strategies/strategy_registry.h"

namespace volt {

RunPlacement::RunPlacement() = default;
RunPlacement::RunPlacement(RunPlacement&&) noexcept = default;
RunPlacement& RunPlacement::operator=(RunPlacement&&) noexcept = default;
RunPlacement::~RunPlacement() = default;

RunPlacement resolve_run(const RunOptions& options, TrainerComponents components, const std::string& who) {
  RunPlacement placement;
  // A named strategy is built first: it declares how many of the node's devices one process
  // drives (Placement::devices_per_process), which decides how many processes the node runs.
  // "auto" picks by the number of processes, so it is resolved after them (one device each).
  NamedSpec spec;  // the one parse of --strategy, when no Strategy object was given
  if (!components.strategy) spec = parse_strategy_spec(options.strategy);
  const bool automatic = !components.strategy && is_automatic_strategy(spec);
  if (!components.strategy && !automatic) components.strategy = strategy_registry().create(spec, OptionContext{});
  const int64_t per_process =
      components.strategy ? components.strategy->placement().devices_per_process(options.devices) : 1;
  check<ConfigurationError>(per_process >= 1 && options.devices % per_process == 0, "--strategy ",
                            components.strategy ? components.strategy->name() : options.strategy, ": drives ",
                            per_process, " device(s) per process, which does not divide --devices ", options.devices,
                            "; ask for a multiple of ", per_process, " devices");
  auto request = options.cluster_request();
  request.devices = options.devices / per_process;  // processes per node
  placement.cluster = make_cluster_environment(options.cluster_environment, current_environment(), request);
  const auto& topology = placement.cluster->topology();
  const std::string origin = std::to_string(topology.local_world_size) + " per node × " +
                             std::to_string(topology.num_nodes) + " node(s) from the " + placement.cluster->name() +
                             " cluster environment";
  if (automatic) components.strategy = create_strategy(spec, topology.world_size, origin);
  check_strategy_fits(*components.strategy, topology.world_size, origin);
  placement.devices = choose_devices(options.accelerator, topology, torch::cuda::device_count(), per_process,
                                     /*share_devices=*/options.process_group_backend == "gloo");
  placement.device = placement.devices.front();
  check<NotSupportedError>(options.process_group_backend != "nccl" || placement.device.is_cuda(),
                           "--process-group-backend nccl: NCCL moves tensors on CUDA devices, but this process "
                           "computes on ",
                           placement.device.str(), " (LibTorch sees ",
                           static_cast<int64_t>(torch::cuda::device_count()),  // a char on 2.x: print it as a number
                           " CUDA device(s)); use --process-group-backend gloo (or auto), or run where a GPU is "
                           "visible");
  placement.launcher = components.launcher;
  if (placement.launcher == nullptr && !placement.cluster->creates_processes_externally() &&
      topology.local_world_size > 1) {
    placement.owned_launcher = std::make_unique<ProcessLauncher>();
    placement.launcher = placement.owned_launcher.get();
  }
  std::shared_ptr<Precision> precision = std::move(components.precision);
  if (precision) {
    const auto asked = canonical_precision_name(options.precision);
    check<ConfigurationError>(precision->name() == asked, who, ": the Precision object given is '", precision->name(),
                              "' but options.precision is '", options.precision, "'; set options.precision to '",
                              precision->name(), "'");
  } else {
    precision = make_precision(options.precision, placement.device);
  }
  placement.strategy = std::move(components.strategy);
  placement.strategy->set_precision(std::move(precision));  // its one owner
  return placement;
}

CPUThreads setup_run_environment(Strategy& strategy, const RunPlacement& placement, const RunOptions& options,
                                 const std::string& diagnostics_directory) {
  const auto& cluster = placement.cluster;
  StrategyEnvironment environment;
  // Before the process group exists: NCCL creates its communicator on the current device.
  make_current_device(placement.device);
  environment.device = placement.device;
  environment.devices = placement.devices;
  environment.processes_per_node = cluster->topology().local_world_size;
  environment.num_nodes = cluster->topology().num_nodes;
  environment.timeout = options.timeout;
  environment.shared_memory = options.shared_memory_collectives;
  environment.process_group_backend = options.process_group_backend;
  environment.hang_check = {.interval = options.hang_check_interval(),
                            .warn_only = options.hang_check_action == "warn",
                            .report_directory = diagnostics_directory};
  environment.cluster = cluster;
  environment.launcher = placement.launcher;
  const auto threads = configure_cpu_threads({.processes_per_node = cluster->topology().local_world_size,
                                              .threads = options.threads,
                                              .blas_threads = options.blas_threads});
  if (options.malloc_tuning) keep_freed_memory_in_heap();
  strategy.setup_environment(environment);
  return threads;
}

}  // namespace volt

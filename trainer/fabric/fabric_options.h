#pragma once
// What a Fabric can be told: the Trainer's hardware, distribution and reproducibility settings,
// with the same names, defaults and checks (TrainerOptions::validate), and nothing about loops,
// which the user's own code owns. Fields are in the order a user most often sets them, so that
// designated initializers read naturally: {.strategy = "ddp", .devices = 2, .precision = "bf16-mixed"}.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "trainer/trainer_options.h"

namespace volt {

struct FabricOptions {
  std::string strategy = "auto";      // NAME[:key=value,...], a registered strategy (--list-strategies)
  int64_t devices = 1;                // processes per node; >= 1
  std::string precision = "32-true";  // see precision_names()
  std::string accelerator = "auto";   // cpu | cuda | auto
  int64_t num_nodes = 1;              // >= 1
  std::string cluster_environment = "auto";  // auto | torchelastic | slurm | mpi | volt
  int64_t node_rank = -1;             // this machine's node with volt's launcher; -1: NODE_RANK or 0
  std::string master_addr;            // rendezvous host; "": MASTER_ADDR, else 127.0.0.1 on one node
  int64_t master_port = 0;            // rendezvous port; 0: MASTER_PORT, else free (one node) or 29500
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};  // bound on every collective; > 0
  bool shared_memory_collectives = true;  // as TrainerOptions::shared_memory_collectives
  std::optional<uint64_t> seed;       // seeds torch (at construction and launch) and unseeded loaders
  bool deterministic = false;         // deterministic algorithms only
  bool cuda_graph = false;            // Fabric::captured_step captures its step (TrainerOptions::cuda_graph)
  bool malloc_tuning = true;          // keep freed memory in the heap (glibc); see malloc_tuning.h
  int64_t threads = 0;                // intra-op threads per process; 0: automatic (core/cpu_threads.h)
  int64_t blas_threads = 0;           // OpenBLAS threads per process; 0: automatic

  // Throws ConfigurationError naming the setting, the value and what is allowed (the Trainer's checks).
  void validate() const;
  // The same settings as TrainerOptions (its loop settings at their defaults): how the Fabric
  // shares the Trainer's resolution of strategy, precision, cluster and device (run_setup.h).
  TrainerOptions trainer_options() const;
  // The hardware, distribution and reproducibility settings of `options` (e.g. parsed from the
  // command line with TrainerOptions::from_args); its loop settings are the caller's business.
  static FabricOptions from(const TrainerOptions& options);
};

}  // namespace volt

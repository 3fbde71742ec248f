#pragma once
// The settings of a run that the Trainer and the Fabric share: hardware, distribution,
// reproducibility. One struct, one set of checks, one resolution (run_setup.h): TrainerOptions
// adds the loops' settings to it, and a Fabric is told these alone (FabricOptions). Fields are in
// the order a user most often sets them, so that designated initializers read naturally:
// {.strategy = "ddp", .devices = 2, .precision = "bf16-mixed"}. Each is also a command-line flag
// in dash form (master_addr → --master-addr).
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace volt {

struct ClusterRequest;
template <typename Options>
class OptionSchema;

struct RunOptions {
  std::string strategy = "auto";      // NAME[:key=value,...], a registered strategy (--list-strategies)
  int64_t devices = 1;                // processes per node; >= 1
  std::string precision = "32-true";  // see precision_names()
  std::string accelerator = "auto";   // cpu | cuda | auto (cuda when LibTorch sees a GPU)
  int64_t num_nodes = 1;              // >= 1
  // Several processes (docs/launching.md): who starts them and where they meet.
  std::string cluster_environment = "auto";  // auto | torchelastic | slurm | mpi | volt
  int64_t node_rank = -1;                    // this machine's node with volt's launcher; -1: NODE_RANK or 0
  std::string master_addr;                   // rendezvous host; "": MASTER_ADDR, else 127.0.0.1 on one node
  int64_t master_port = 0;                   // rendezvous port; 0: MASTER_PORT, else free (one node) or 29500
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};  // bound on every collective; > 0
  // CPU collectives among ranks of one host through shared memory instead of Gloo's sockets
  // (Note [Collectives through shared memory]); VOLT_SHM=0 in the environment turns it off too.
  bool shared_memory_collectives = true;
  // The process group's backend (Lightning's process_group_backend): auto (nccl on CUDA, gloo on
  // the CPU), gloo (also on CUDA: device tensors staged through host memory, Note [Device tensors
  // on Gloo], and the processes of a node may share its GPUs) or nccl (CUDA only).
  std::string process_group_backend = "auto";
  // Note [Diagnosing a hang]: after a rank has waited this long in a collective, the ranks compare
  // where they are; collectives out of step are reported (every rank prints which collective and
  // which ranks are where) and end the run (hang_check_action "fail") or not ("warn"). 0: off.
  // Unset: 5 s, or half the timeout where that is shorter (hang_check_interval()).
  std::optional<std::chrono::milliseconds> hang_check;
  std::string hang_check_action = "fail";
  std::optional<uint64_t> seed;  // seeds torch (at construction and launch) and volt's samplers
  bool deterministic = false;    // deterministic algorithms only
  // Capture the training step in CUDA graphs and replay it (docs/training_loop.md#captured-steps):
  // CUDA only, single_device, optimizers that are volt::FusedAdamW.
  bool cuda_graph = false;
  bool malloc_tuning = true;  // keep freed memory in the heap (glibc); see malloc_tuning.h
  // CPU threads per process (core/cpu_threads.h): LibTorch's intra-op pool gets the core share,
  // OpenBLAS one thread inside it. 0: automatic (OMP_NUM_THREADS / OPENBLAS_NUM_THREADS win).
  int64_t threads = 0;       // intra-op threads; >= 0
  int64_t blas_threads = 0;  // OpenBLAS threads; >= 0

  // Throws ConfigurationError naming the flag, the value and what is allowed.
  void validate() const;
  // The hang check's interval in effect: hang_check, or its default.
  std::chrono::milliseconds hang_check_interval() const;
  // What devices, num_nodes, node_rank and master_addr/port ask of the cluster environment.
  ClusterRequest cluster_request() const;
  // Each field's flag: name, help and requirements (run/run_option_flags.h).
  static const OptionSchema<RunOptions>& schema();

 protected:
  // The checks no single key's requirement can make: node_rank below num_nodes, and the precision
  // and cluster environment against their registries (whose errors suggest the closest name).
  void check_combinations() const;
};

}  // namespace volt

#include "distributed/process_group_setup.h"

#include <cstdlib>

#include <algorithm>
#include <thread>

#include "core/error.h"
#include "distributed/process_launcher.h"

namespace volt {

std::shared_ptr<Communicator> start_process_group(const ClusterEnvironment& cluster,
                                                  std::chrono::milliseconds timeout, torch::Device device,
                                                  ProcessLauncher* launcher, bool shared_memory,
                                                  const std::string& backend, const HangCheckOptions& hang_check) {
  // Note [Collectives through shared memory]. VOLT_SHM=0 is for runs whose code says nothing (a
  // benchmark that puts a simulated link between network namespaces of one host, which shared
  // memory would bypass); VOLT_SHM=1 cannot turn on what the options turned off. Checked before
  // any rank is started.
  // VOLT_RING_THREAD=0|1 overrides the core count's choice of a ring thread (Note [Ring collectives
  // off the calling thread]): a run on a small machine can try it, and the tests run both paths.
  const char* ring = std::getenv("VOLT_RING_THREAD");
  check<ConfigurationError>(ring == nullptr || std::string(ring) == "0" || std::string(ring) == "1",
                            "VOLT_RING_THREAD: expected 0 (rings on the calling thread) or 1 (on a thread of "
                            "their own), got '", ring == nullptr ? "" : ring, "'");
  const char* shm = std::getenv("VOLT_SHM");
  check<ConfigurationError>(shm == nullptr || std::string(shm) == "0" || std::string(shm) == "1",
                            "VOLT_SHM: expected 0 (collectives over Gloo's sockets) or 1, got '",
                            shm == nullptr ? "" : shm, "'");
  shared_memory = shared_memory && (shm == nullptr || std::string(shm) == "1");
  const auto& topology = cluster.topology();
  CommunicatorOptions options;
  if (!cluster.creates_processes_externally() && topology.local_world_size > 1) {
    check<ConfigurationError>(launcher != nullptr, "process group: this process must start the other ",
                              topology.local_world_size - 1, " local rank(s) itself (cluster environment '",
                              cluster.name(), "'), but no ProcessLauncher was handed to it; give the Trainer "
                              "run_main's launcher, or start the ranks with torchrun, srun or mpirun");
    if (!launcher->launched()) {
      LaunchOptions launch;
      launch.local_world_size = topology.local_world_size;
      launch.node_rank = topology.node_rank;
      launch.num_nodes = topology.num_nodes;
      launch.master_addr = cluster.master_addr();
      launch.master_port = cluster.master_port();
      launch.finish_timeout = timeout + std::chrono::minutes(1);
      if (cluster.master_port() == 0) {
        // The port rank 0's store got from the kernel: started once it listens, the ranks find it
        // there, and no other process of the host can have taken it in between.
        options.on_store_bound = [launcher, launch](int64_t port) mutable {
          launch.master_port = port;
          launcher->launch(launch);
        };
      } else {
        launcher->launch(launch);
      }
    }
  }
  options.rank = topology.global_rank;
  options.world_size = topology.world_size;
  options.master_addr = cluster.master_addr();
  options.master_port = cluster.master_port();
  options.store_is_external = cluster.store_is_external();
  options.store_prefix = cluster.store_prefix();
  options.timeout = timeout;
  options.device = device;
  options.backend = backend;
  options.hang_check = hang_check;
  const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  options.ring_thread = ring != nullptr ? std::string(ring) == "1"
                                        : cores / std::max<int64_t>(1, topology.local_world_size) >= 2;
  options.shared_memory = shared_memory;
  // Ranks with different VOLT_HOST_IDs are on different hosts as far as shared memory goes
  // (CommunicatorOptions::host_id): containers that share a kernel, or several "nodes" on one.
  if (const char* host = std::getenv("VOLT_HOST_ID"); host != nullptr && *host != '\0') options.host_id = host;
  return Communicator::connect(options);
}

}  // namespace volt

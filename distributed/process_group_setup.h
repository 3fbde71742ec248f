#pragma once
#include <chrono>
#include <memory>

#include <torch/torch.h>

#include "distributed/cluster/cluster_environment.h"
#include "distributed/communicator.h"
#include "distributed/hang_check.h"

namespace volt {

class ProcessLauncher;

// Brings this process into the run's process group: when `cluster` says this process must start
// the other local ranks itself (volt's launcher, more than one process per node), starts them
// first through `launcher` (unless it already did), then joins the group through the cluster's
// rendezvous. Returns the root communicator. Bounded by `timeout`. `device` is the device this
// process computes on (cuda:<local rank> or the CPU); it picks the backend when `backend` is auto
// (nccl for CUDA, gloo otherwise), and an NCCL group is bound to it. volt's rings get a thread of their own when every
// process of the node has two cores or more (CommunicatorOptions::ring_thread). `shared_memory`:
// CPU collectives among ranks of one host go through shared memory (CommunicatorOptions::
// shared_memory) unless VOLT_SHM=0 is in the environment; VOLT_HOST_ID, when set, is this
// rank's host id for that (CommunicatorOptions::host_id). `backend`: "auto" (as above), "gloo" or
// "nccl" (CommunicatorOptions::backend; gloo on a CUDA device: Note [Device tensors on Gloo]).
// `hang_check`: CommunicatorOptions::hang_check (Note [Diagnosing a hang]).
// Throws ConfigurationError when ranks must be started and `launcher` is null, or VOLT_SHM is
// neither 0 nor 1. [collective]
std::shared_ptr<Communicator> start_process_group(const ClusterEnvironment& cluster, std::chrono::milliseconds timeout,
                                                  torch::Device device, ProcessLauncher* launcher,
                                                  bool shared_memory = true, const std::string& backend = "auto",
                                                  const HangCheckOptions& hang_check = {});

}  // namespace volt

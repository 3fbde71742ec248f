#pragma once
// The Communicator over a c10d process group (process_group_communicator.cpp); built by
// Communicator::connect (communicator_connect.cpp). Private to distributed/.
#include <chrono>
#include <memory>
#include <string>

#include "distributed/c10d_compat.h"
#include "distributed/communicator.h"
#include "distributed/peer_monitor.h"

namespace volt {

// What a communicator over a process group is built from; its sub-groups inherit all of it (with
// their own prefix of the store).
struct ProcessGroupSetup {
  std::string backend;  // "gloo" or "nccl"
  std::chrono::milliseconds timeout{0};
  c10::intrusive_ptr<c10d::Store> store;                    // the rendezvous
  std::shared_ptr<gloo::transport::Device> device;          // Gloo's network device (null for nccl)
  torch::Device compute_device = torch::kCPU;               // this rank's device (Note [NCCL and this rank's device])
  std::shared_ptr<PeerMonitor> monitor;                     // may be null
  int64_t inline_max_bytes = 0;                             // Gloo: the inline all_reduce context when > 0
  bool ring_thread = false;                                 // Gloo: volt's rings on their own thread
  bool shared_memory = false;                               // Gloo: reductions through shared memory on one host
  std::string host_id;                                      // empty: SharedMemoryGroup::host_id()
};

// The root communicator (global ranks 0..size-1) of a rendezvous: builds the backend's process
// group, and with Gloo the inline all_reduce context and the ring thread as `setup` asks
// (CommunicatorOptions). [collective]
std::shared_ptr<Communicator> make_process_group_communicator(int64_t rank, int64_t size, ProcessGroupSetup setup);

}  // namespace volt

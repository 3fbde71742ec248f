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

// The root communicator (global ranks 0..size-1) of a rendezvous over `store`: builds the
// `backend` process group ("gloo" over `device`, or "nccl" bound to `compute_device`), and with
// Gloo the inline all_reduce context when inline_max_bytes > 0 and the ring thread when
// `ring_thread` (CommunicatorOptions). [collective]
std::shared_ptr<Communicator> make_process_group_communicator(int64_t rank, int64_t size,
                                                              std::chrono::milliseconds timeout, std::string backend,
                                                              c10::intrusive_ptr<c10d::Store> store,
                                                              std::shared_ptr<gloo::transport::Device> device,
                                                              torch::Device compute_device,
                                                              std::shared_ptr<PeerMonitor> monitor,
                                                              int64_t inline_max_bytes, bool ring_thread);

}  // namespace volt

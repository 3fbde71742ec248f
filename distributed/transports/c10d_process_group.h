#pragma once
// The c10d process group under a ProcessGroupCommunicator, and what its setup exchanges through
// it before the communicator's numbered collectives exist. Private to distributed/.
#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "distributed/c10d_compat.h"
#include "distributed/transports/c10d_entry.h"
#include "distributed/reduce_op.h"

namespace volt {

// Builds the backend's process group ("gloo" or "nccl") over `store` (a rendezvous among `size`
// ranks); an NCCL group is bound to `compute_device` (Note [NCCL and this rank's device]).
c10::intrusive_ptr<compat::C10dBackend> make_process_group(const std::string& backend,
                                                           const c10::intrusive_ptr<c10d::Store>& store,
                                                           int64_t rank, int64_t size,
                                                           const std::shared_ptr<gloo::transport::Device>& device,
                                                           std::chrono::milliseconds timeout,
                                                           const torch::Device& compute_device);

// Returns once every rank of the Gloo group `group` has connected to every other (an uncounted
// barrier, entered through `entry`). A Gloo connection is complete on one side before the other
// has read its handshake: a rank that used no collective and left at once failed a peer still
// connecting to it ("Connection closed by peer"; seen with node_groups' leaders). [collective]
void wait_until_connected(compat::C10dBackend& group, C10dEntry& entry, std::chrono::milliseconds timeout);

// c10d's op for `op` (Mean: SUM, which the caller divides; Gloo has no AVG).
c10d::ReduceOp to_c10d(ReduceOp op);

// Every rank's `bytes`, by rank, straight through `group` (a Gloo group of `size` ranks, entered
// through `entry`): what setting a communicator up exchanges, neither counted nor numbered like
// the collectives a user calls. [collective]
std::vector<std::string> all_gather_bytes_unnumbered(compat::C10dBackend& group, C10dEntry& entry, int64_t size,
                                                     std::chrono::milliseconds timeout, const std::string& bytes);

}  // namespace volt

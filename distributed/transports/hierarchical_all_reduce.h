#pragma once
// Note [Hierarchical all_reduce]
// A group whose ranks sit on several hosts, several of them on at least one, all_reduces in three
// stages: the ranks of each host reduce into their host's leader (its lowest rank) through a
// shared-memory segment of the host's own (SharedMemoryGroup::reduce, Note [Collectives through
// shared memory]); the leaders all_reduce among themselves over Gloo; each leader broadcasts the
// result to its host's ranks through the segment. Only the leaders' bytes cross the network: with
// k ranks a host, 1/k of what a flat all_reduce over Gloo moves between hosts, and no loopback
// sockets within a host. Gloo's all_reduce leaves the same bits on every leader, and each rank
// copies its leader's, so every rank of the group ends with the same bits. The order of the sum:
// rank order within each host, then Gloo's over the hosts, so the last bits can differ from a flat
// all_reduce's. Mean: the sum divided by the group's size by each leader, before the broadcast.
// bfloat16 crosses the leaders' Gloo in float32 where Gloo has no bfloat16 (LibTorch < 2.2).
// A leader whose network stage fails marks its segment failed, so that its host's ranks fail at
// once naming it instead of at their timeout; a rank that dies fails its host's segment the same
// way (SharedMemoryGroup), and the leaders' Gloo the others.
// Built by the Communicator when its shared_memory option is on and the ranks' host ids
// (SharedMemoryGroup::host_id, or CommunicatorOptions::host_id) say the group spans hosts with
// several ranks on one; where any host cannot map its segment, no rank uses it (they agree), and
// all_reduce stays on Gloo. Only all_reduce (and so DDP's buckets) goes this way; the other
// collectives of such a group use Gloo.
// Not thread-safe: one thread issues the all_reduces, in the same order on every rank. Private to
// distributed/.
#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "distributed/c10d_compat.h"
#include "distributed/transports/c10d_entry.h"
#include "distributed/reduce_op.h"
#include "distributed/transports/shared_memory_group.h"

namespace volt {

class HierarchicalAllReduce {
 public:
  // Whether ranks on `hosts` (a host id per rank) would use it: more than one host, and more than
  // one rank on some host.
  static bool applies(const std::vector<std::string>& hosts);

  // The group's hierarchy, or null on every rank when some host could not map its segment
  // (`why_not` says why). Builds a Gloo group per host with several ranks (for the setup of its
  // segment) and one among the leaders, each under its own prefix of `store`, over `device`.
  // `agree` is an all_gather of bytes over the whole group. `describe` names the group in errors.
  // [collective]
  static std::unique_ptr<HierarchicalAllReduce> join(const c10::intrusive_ptr<c10d::Store>& store,
                                                     const std::shared_ptr<gloo::transport::Device>& device,
                                                     int64_t rank, const std::vector<std::string>& hosts,
                                                     std::chrono::milliseconds timeout, const std::string& describe,
                                                     const SharedMemoryGroup::Exchange& agree,
                                                     std::string* why_not = nullptr);

  // Reduces `tensor` (contiguous; what SharedMemoryGroup::accepts takes with `op`) over the group,
  // in place. [collective]
  void all_reduce(torch::Tensor& tensor, ReduceOp op);

  int64_t host_count() const { return host_count_; }

 private:
  HierarchicalAllReduce() = default;

  int64_t group_size_ = 0, host_count_ = 0;
  std::chrono::milliseconds timeout_{0};
  std::string describe_;
  c10::intrusive_ptr<compat::C10dBackend> host_group_;  // setting up local_; null on a host of one rank
  C10dEntry host_entry_;
  std::unique_ptr<SharedMemoryGroup> local_;            // null on a host of one rank
  c10::intrusive_ptr<compat::C10dBackend> leaders_;     // null unless this rank leads its host
  C10dEntry leaders_entry_;
};

}  // namespace volt

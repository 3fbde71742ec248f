#pragma once
// What carries a process-group communicator's collectives: the side transports a group joined
// (rings, the inline Gloo all_reduce, shared memory on one host, the hierarchical all_reduce
// across hosts) and the routing table that picks one per call (Note [One route per collective]).
// Private to distributed/.
#include <chrono>
#include <memory>
#include <string>

#include "distributed/process_group_communicator.h"
#include "distributed/reduce_op.h"
#include "distributed/transports/hierarchical_all_reduce.h"
#include "distributed/transports/inline_gloo_all_reduce.h"
#include "distributed/transports/ring_worker.h"
#include "distributed/transports/shared_memory_group.h"

namespace volt {

// The collectives a communicator routes; the chunked ones apart from their even versions, since
// they route differently.
enum class Collective {
  AllReduce,
  Reduce,
  Broadcast,
  AllGather,
  Gather,
  ReduceScatter,
  AllGatherChunks,
  ReduceScatterChunks,
  Barrier
};

// Where one call goes.
enum class Transport {
  Nothing,       // an empty payload: nothing to move (Gloo's own would divide by zero)
  SharedMemory,  // the group's segment on one host (Note [Collectives through shared memory])
  Hierarchical,  // shared memory on each host, Gloo among hosts (Note [Hierarchical all_reduce])
  Inline,        // the inline Gloo context, on the calling thread (Note [Inline all_reduce])
  ProcessGroup,  // c10d's own collective
  Ring,          // volt's ring over the process group's send/recv (Note [Ring reduce_scatter])
  Padding,       // an uneven collective as an even one over padded chunks (padded_chunks.h)
};

// Note [One route per collective]
// Each collective has one row in a routing table (transports.cpp): the transports it may take, in
// order of preference, each with the condition under which it takes the call (the group joined
// it, the backend is the one it needs, it accepts the tensor's dtype and op). route() returns the
// first that takes the call; the communicator's method then runs the call there and decides
// nothing else. Whether a ring runs on the ring thread is not a route: start_ring asks
// `rings`, whatever the transport.
class Transports {
 public:
  // The rings and the inline context `setup` asks for. [collective with the inline context]
  Transports(const ProcessGroupSetup& setup, int64_t rank, int64_t size, std::chrono::milliseconds timeout);
  ~Transports();
  Transports(const Transports&) = delete;
  Transports& operator=(const Transports&) = delete;

  // Joins shared memory on one host, or the hierarchical all_reduce across hosts, where `setup`
  // asks for shared memory; `exchange` is an all_gather of bytes over the process group. Rank 0
  // warns when the group falls back to Gloo. [collective]
  void join_host_memory(const ProcessGroupSetup& setup, const SharedMemoryGroup::Exchange& exchange, int64_t rank,
                        int64_t size, std::chrono::milliseconds timeout, const std::string& describe);

  // The transport that carries `collective` of `tensor` (undefined for a barrier) with `op`.
  Transport route(Collective collective, const torch::Tensor& tensor, ReduceOp op = ReduceOp::Sum) const;

  InlineGlooAllReduce& inline_all_reduce() const { return *inline_; }
  SharedMemoryGroup& shared_memory() const { return *shm_; }
  HierarchicalAllReduce& hierarchy() const { return *hierarchy_; }
  bool has_shared_memory() const { return shm_ != nullptr; }
  bool reduces_through_shared_memory() const { return shm_ != nullptr || hierarchy_ != nullptr; }
  bool has_inline_all_reduce() const { return inline_ != nullptr; }
  // Null: volt's rings run on the calling thread.
  RingWorker* rings() const { return rings_.get(); }

 private:
  bool takes(Transport transport, Collective collective, const torch::Tensor& tensor, ReduceOp op) const;

  std::string backend_;
  std::unique_ptr<InlineGlooAllReduce> inline_;       // null: every reduction on the process group
  std::unique_ptr<SharedMemoryGroup> shm_;            // null: no collective through shared memory
  std::unique_ptr<HierarchicalAllReduce> hierarchy_;  // null: no hierarchical all_reduce
  std::unique_ptr<RingWorker> rings_;                 // last: destroyed first, so no job of it outlives the segment
};

}  // namespace volt

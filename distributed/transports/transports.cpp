// The side transports a process-group communicator joins, and the routing table (Note [One route
// per collective]).
#include "distributed/transports/transports.h"

#include <algorithm>
#include <span>

#include "core/warning.h"

namespace volt {

namespace {

// The routing table: each collective's transports, in order of preference. ProcessGroup, Ring
// and Padding are last resorts (each row ends with one that always takes the call).
using T = Transport;
constexpr T kAllReduce[] = {T::Hierarchical, T::SharedMemory, T::Inline, T::ProcessGroup};
constexpr T kReduce[] = {T::SharedMemory, T::Inline, T::ProcessGroup};
constexpr T kBroadcast[] = {T::SharedMemory, T::ProcessGroup};
constexpr T kAllGather[] = {T::Nothing, T::SharedMemory, T::ProcessGroup};
constexpr T kGather[] = {T::Nothing, T::ProcessGroup};
// NCCL's native reduce_scatter; c10d's Gloo has none (Note [Gloo reduce_scatter]).
constexpr T kReduceScatter[] = {T::ProcessGroup, T::SharedMemory, T::Ring};
constexpr T kAllGatherChunks[] = {T::Padding, T::SharedMemory, T::Ring};
constexpr T kReduceScatterChunks[] = {T::Padding, T::SharedMemory, T::Ring};
constexpr T kBarrier[] = {T::SharedMemory, T::ProcessGroup};

std::span<const Transport> candidates(Collective collective) {
  switch (collective) {
    case Collective::AllReduce: return kAllReduce;
    case Collective::Reduce: return kReduce;
    case Collective::Broadcast: return kBroadcast;
    case Collective::AllGather: return kAllGather;
    case Collective::Gather: return kGather;
    case Collective::ReduceScatter: return kReduceScatter;
    case Collective::AllGatherChunks: return kAllGatherChunks;
    case Collective::ReduceScatterChunks: return kReduceScatterChunks;
    case Collective::Barrier: return kBarrier;
  }
  return kBarrier;  // unreachable: every collective has a row
}

bool is_reduction(Collective collective) {
  return collective == Collective::AllReduce || collective == Collective::Reduce ||
         collective == Collective::ReduceScatter || collective == Collective::ReduceScatterChunks;
}

}  // namespace

Transports::Transports(const ProcessGroupSetup& setup, int64_t rank, int64_t size, std::chrono::milliseconds timeout)
    : backend_(setup.backend) {
  if (backend_ == "gloo" && setup.ring_thread) rings_ = std::make_unique<RingWorker>();
  if (backend_ == "gloo" && size > 1 && setup.inline_max_bytes > 0 && InlineGlooAllReduce::compiled_in()) {
    inline_ = std::make_unique<InlineGlooAllReduce>(c10::make_intrusive<c10d::PrefixStore>("inline", setup.store), rank,
                                                    size, setup.device, timeout, setup.inline_max_bytes);
  }
}

Transports::~Transports() = default;

void Transports::join_host_memory(const ProcessGroupSetup& setup, const SharedMemoryGroup::Exchange& exchange,
                                  int64_t rank, int64_t size, std::chrono::milliseconds timeout,
                                  const std::string& describe) {
  if (backend_ != "gloo" || size <= 1 || !setup.shared_memory) return;
  const auto hosts = exchange(setup.host_id.empty() ? SharedMemoryGroup::host_id() : setup.host_id);
  std::string why_not;
  if (std::all_of(hosts.begin(), hosts.end(), [&](const std::string& host) { return host == hosts[0]; })) {
    // Null when /dev/shm cannot hold the segment: Gloo then.
    shm_ = SharedMemoryGroup::join(exchange, rank, size, timeout, describe, SharedMemoryGroup::kDefaultSlotBytes,
                                   &why_not, hosts[0]);
    if (shm_ && setup.monitor && setup.monitor->hang_check().interval.count() > 0) {
      shm_->set_interruption([monitor = setup.monitor] { return monitor->hang_verdict(); });
    }
  } else if (HierarchicalAllReduce::applies(hosts)) {
    // Null when a host cannot map its segment: Gloo then.
    hierarchy_ = HierarchicalAllReduce::join(c10::make_intrusive<c10d::PrefixStore>("hierarchy", setup.store),
                                             setup.device, rank, hosts, timeout, describe, exchange, &why_not);
  }
  // A fallback the user should hear of (every rank agrees on it; rank 0 says it).
  if (!why_not.empty() && rank == 0) {
    warn(describe + ": collectives go through Gloo, not through shared memory: " + why_not);
  }
}

Transport Transports::route(Collective collective, const torch::Tensor& tensor, ReduceOp op) const {
  for (const Transport transport : candidates(collective)) {
    if (takes(transport, collective, tensor, op)) return transport;
  }
  return Transport::ProcessGroup;
}

bool Transports::takes(Transport transport, Collective collective, const torch::Tensor& tensor, ReduceOp op) const {
  switch (transport) {
    case Transport::Nothing: return tensor.defined() && tensor.numel() == 0;
    case Transport::SharedMemory:
      if (!shm_) return false;
      if (!tensor.defined()) return true;  // a barrier
      return is_reduction(collective) ? SharedMemoryGroup::accepts(tensor, op) : SharedMemoryGroup::moves(tensor);
    case Transport::Hierarchical: return hierarchy_ && SharedMemoryGroup::accepts(tensor, op);
    case Transport::Inline: return inline_ && inline_->accepts(tensor, op);
    // Gloo has no reduce_scatter of its own; every other collective has one on every backend.
    case Transport::ProcessGroup: return collective != Collective::ReduceScatter || backend_ != "gloo";
    case Transport::Ring: return true;
    // Gloo runs uneven chunks on volt's rings; other backends pad them to an even collective.
    case Transport::Padding: return backend_ != "gloo";
  }
  return false;
}

}  // namespace volt

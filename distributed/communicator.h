#pragma once
// volt's only door to other processes. A Communicator is one c10d process group (Gloo on CPU,
// NCCL for CUDA tensors when LibTorch has CUDA) joined through a c10d TCPStore rendezvous, plus
// what volt adds around it: every collective bounded by a timeout, errors that name the rank, the
// collective and what to do, per-kind call and byte counters, and sub-groups.
//
// Only the files of distributed/ include c10d headers; everything else talks to c10d
// through this header (docs/architecture.md).
//
// Collectives. Every method marked [collective] must be called by every rank of the communicator,
// in the same order, with tensors of the same shape and dtype (c10d matches calls by their order,
// not by name). Tensors must be dense; a non-contiguous tensor is reduced through a contiguous copy.
// In-place forms modify their argument; `*_async` forms return a CollectiveHandle at once and keep
// the tensor alive until the handle is waited on. Every collective takes bfloat16 CPU tensors,
// which c10d's Gloo backend does not (Note [bfloat16 over Gloo]).
//
// Thread safety: one thread issues collectives (like c10d itself: the order of calls is the
// protocol). counters() may be read from any thread.
#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "distributed/collective_counters.h"
#include "distributed/collective_handle.h"
#include "distributed/hang_check.h"
#include "distributed/reduce_op.h"

namespace volt {

struct CommunicatorOptions {
  int64_t rank = 0;        // this process's rank, in [0, world_size)
  int64_t world_size = 1;  // >= 1
  // Rendezvous: a c10d TCPStore at master_addr:master_port. Rank 0 hosts it unless
  // store_is_external (torchelastic's agent store: then every rank, rank 0 too, is a client).
  std::string master_addr = "127.0.0.1";
  // 1..65535; 0 on the rank that hosts the store: any free port, chosen by the kernel as the store
  // binds it, and told to on_store_bound.
  int64_t master_port = 29500;
  // Called on the rank that hosts the store once it listens, with its port, before the rendezvous
  // waits for the other ranks: where they are started with the port (start_process_group).
  std::function<void(int64_t port)> on_store_bound;
  bool store_is_external = false;
  // Prepended to every store key (torchelastic: "/worker/attempt_<restart count>"), so that a
  // restarted group never reads keys its predecessor left behind. Empty: none.
  std::string store_prefix;
  // Bound on the rendezvous and on every collective (PyTorch's default is 30 minutes).
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};
  // "gloo", "nccl" or "auto" (nccl when `device` is CUDA, else gloo). nccl needs a LibTorch with CUDA.
  // gloo with a CUDA `device` stages that device's tensors through host memory (Note [Device
  // tensors on Gloo] in host_staged_communicator.h).
  std::string backend = "auto";
  // The device this rank computes on. With nccl it must be a CUDA device with an index (the
  // Trainer passes cuda:<local rank>): the NCCL communicators are bound to it (Note [NCCL and
  // this rank's device] in process_group_communicator.cpp).
  torch::Device device = torch::kCPU;
  // The local address Gloo listens on. Empty: the GLOO_SOCKET_IFNAME interface when that variable
  // is set (PyTorch's rule), otherwise the local address of the route to master_addr (so that
  // ranks in different network namespaces or on different hosts pick the right interface).
  std::string bind_address;
  // How often each rank tells the others through the store that it is alive, so that a failed
  // collective can name the rank to blame (Note [Naming the failed rank]); 0: no monitor.
  std::chrono::milliseconds heartbeat_interval{500};
  // Gloo all_reduces of CPU float/double/int32/int64 tensors up to this size run on the calling
  // thread instead of the process group's worker thread: ~2-3x less latency for small ones (Note
  // [Inline all_reduce]); larger ones stay asynchronous so that they overlap with computation.
  // Reductions of bfloat16 take the inline path at any size (Note [bfloat16 over Gloo]).
  // 0: no inline path: every all_reduce goes through the process group, bfloat16 ones through
  // float32. Must be the same on every rank.
  int64_t inline_all_reduce_max_bytes = 1 << 20;
  // Whether volt's own ring collectives (Gloo's reduce_scatter and the uneven-chunk collectives)
  // run on a thread of their own, so that they overlap with what the caller computes meanwhile
  // (Note [Ring collectives off the calling thread]), or on the calling thread. The thread pays
  // only with a core to spare: where the computing threads already take every core (one process
  // per core), it competes with them and the calling thread finishes the ring sooner. The
  // Trainer turns it on when every process of the node has two cores or more
  // (process_group_setup.h). Results are the same bit for bit either way. Inherited by sub-groups.
  bool ring_thread = true;
  // Whether the Gloo backend's collectives on CPU tensors go through a shared-memory segment when
  // every rank of the group is on this host (Note [Collectives through shared memory] in
  // shared_memory_group.h): all_reduce, reduce and reduce_scatter (float32, float64, float16,
  // bfloat16, int32, int64), all_gather (all three forms), broadcast (any dtype) and the barrier;
  // gather stays on Gloo. No sockets; each rank reduces a slice, in rank order, so with three ranks
  // or more the last bits can differ from Gloo's ring (two ranks: the same bits). Groups across
  // hosts use Gloo as before. Off here (a communicator built by hand gets what it asks for); the
  // Trainer's and the Fabric's process group turn it on (TrainerOptions::shared_memory_collectives,
  // VOLT_SHM=0). Must be the same on every rank. Inherited by sub-groups.
  // A group across hosts with several ranks on one all_reduces hierarchically instead (Note
  // [Hierarchical all_reduce] in hierarchical_all_reduce.h): through each host's segment, and
  // over Gloo among one leader per host.
  bool shared_memory = false;
  // Which host this rank is on, for shared_memory: ranks with equal ids share memory. Empty: the
  // kernel's boot id and the host name (SharedMemoryGroup::host_id). Set it to tell apart ranks
  // that share a kernel but must not share memory (containers), or to emulate several hosts on one
  // (the Trainer reads VOLT_HOST_ID). Inherited by sub-groups.
  std::string host_id;

  // Note [Diagnosing a hang] (hang_check.h): a collective this rank has waited in longer than
  // hang_check.interval makes the ranks compare where they are; collectives out of step end the
  // run with a report (or only report it, warn_only). Needs the heartbeat (heartbeat_interval >
  // 0); the interval must be below `timeout`. Off here (0); the Trainer's and the Fabric's
  // process group turn it on (RunOptions::hang_check).
  HangCheckOptions hang_check;

  // Throws ConfigurationError naming the field, the value and what is allowed.
  void validate() const;
};

class Communicator {
 public:
  // Joins the group described by `options`: connects to the store (rank 0 starts it), then
  // builds the backend's process group. Blocks until every rank joined, at most options.timeout;
  // throws DistributedError when the rendezvous fails or times out. [collective]
  static std::shared_ptr<Communicator> connect(const CommunicatorOptions& options);

  virtual ~Communicator() = default;

  int64_t rank() const { return rank_; }
  int64_t size() const { return size_; }
  // The global rank (rank in the root communicator) of each member, by rank in this one.
  const std::vector<int64_t>& global_ranks() const { return global_ranks_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  virtual std::string backend_name() const = 0;
  // Where the backend moves tensors: the CPU for gloo, this rank's CUDA device for nccl.
  virtual torch::Device tensor_device() const = 0;

  // ---- collectives (each [collective])
  // The blocking forms also take a CPU tensor on a device's backend, staged through
  // tensor_device(); the *_async forms refuse it (Note [CPU tensors on a device's backend]).
  // Reduces `tensor` over all ranks, in place. Mean needs a floating-point tensor.
  void all_reduce(torch::Tensor& tensor, ReduceOp op = ReduceOp::Sum);
  virtual CollectiveHandle all_reduce_async(torch::Tensor tensor, ReduceOp op = ReduceOp::Sum) = 0;
  // Copies `root`'s tensor into every rank's `tensor`, in place.
  void broadcast(torch::Tensor& tensor, int64_t root = 0);
  virtual CollectiveHandle broadcast_async(torch::Tensor tensor, int64_t root = 0) = 0;
  // Every rank's `tensor` (same shape on every rank), stacked: result[r] is rank r's tensor.
  torch::Tensor all_gather(const torch::Tensor& tensor);
  virtual CollectiveHandle all_gather_async(const torch::Tensor& tensor) = 0;
  // `input`'s first dimension (a multiple of size()) is split into size() equal chunks; returns
  // chunk rank() reduced over all ranks. Note [Gloo reduce_scatter] says how Gloo does it.
  torch::Tensor reduce_scatter(const torch::Tensor& input, ReduceOp op = ReduceOp::Sum);
  virtual CollectiveHandle reduce_scatter_async(const torch::Tensor& input, ReduceOp op = ReduceOp::Sum) = 0;
  // Reduces into `root`'s `tensor`, in place; other ranks' tensors are left unspecified.
  void reduce(torch::Tensor& tensor, int64_t root = 0, ReduceOp op = ReduceOp::Sum);
  virtual CollectiveHandle reduce_async(torch::Tensor tensor, int64_t root = 0, ReduceOp op = ReduceOp::Sum) = 0;
  // Returns once every rank has called it.
  void barrier();
  virtual CollectiveHandle barrier_async() = 0;
  // Every rank's `tensor` (same shape on every rank) on `root`, stacked like all_gather's result;
  // an undefined tensor on the other ranks.
  torch::Tensor gather(const torch::Tensor& tensor, int64_t root = 0);
  virtual CollectiveHandle gather_async(const torch::Tensor& tensor, int64_t root = 0) = 0;

  // ---- into preallocated flat outputs (ZeRO, FSDP), each [collective]
  // `output` (contiguous, input's dtype and device) gets size() × input.numel() elements: rank
  // r's `input` at [r·n, (r+1)·n), n = input.numel(). The result of wait() is `output`.
  void all_gather_into(torch::Tensor output, const torch::Tensor& input);
  virtual CollectiveHandle all_gather_into_async(torch::Tensor output, const torch::Tensor& input) = 0;
  // `input` holds size() × output.numel() elements; `output` (contiguous, input's dtype and
  // device) gets elements [r·m, (r+1)·m) of input reduced over all ranks, r = rank(),
  // m = output.numel(). `input` is not modified. Note [Gloo reduce_scatter] says how Gloo does it.
  void reduce_scatter_into(torch::Tensor output, const torch::Tensor& input, ReduceOp op = ReduceOp::Sum);
  virtual CollectiveHandle reduce_scatter_into_async(torch::Tensor output, const torch::Tensor& input,
                                                     ReduceOp op = ReduceOp::Sum) = 0;

  // ---- uneven chunks (ZeRO's buffers laid out by owner), each [collective]
  // A flat tensor of size() consecutive chunks, chunk r of counts[r] elements (counts the same on
  // every rank, each >= 0, summing to the tensor's numel; a chunk may be empty). Gloo runs volt's
  // rings (Note [Ring all_gather in place], Note [Ring reduce_scatter]); other backends pad every
  // chunk to the largest and use all_gather_into / reduce_scatter_into (padded_chunks.h).
  // `flat` (contiguous): on entry chunk rank() holds this rank's values; afterwards every rank's
  // `flat` holds every rank's chunk. The result of wait() is `flat`.
  void all_gather_chunks(torch::Tensor flat, const std::vector<int64_t>& counts);
  virtual CollectiveHandle all_gather_chunks_async(torch::Tensor flat, std::vector<int64_t> counts) = 0;
  // `input` (contiguous) laid out as above; `output` (contiguous, counts[rank()] elements, input's
  // dtype and device) gets chunk rank() reduced over all ranks. `input` is not modified.
  void reduce_scatter_chunks(torch::Tensor output, const torch::Tensor& input, const std::vector<int64_t>& counts,
                             ReduceOp op = ReduceOp::Sum);
  virtual CollectiveHandle reduce_scatter_chunks_async(torch::Tensor output, const torch::Tensor& input,
                                                       std::vector<int64_t> counts, ReduceOp op = ReduceOp::Sum) = 0;

  // ---- point to point (not collectives: only the two ranks take part)
  // Note [Point to point]: send_async(tensor, peer) hands `tensor` to rank `peer` of this
  // communicator, whose recv_async(tensor, src) of a tensor of the same shape and dtype fills it in
  // place; between two ranks, sends and receives match in the order each side issues them. They
  // are counted (send, recv) but do not advance the collective sequence by which the peer monitor
  // compares ranks (Note [Naming the failed rank]): ranks issue different numbers of them. A
  // receive whose send does not come within the timeout fails naming the peer. The blocking forms
  // stage a CPU tensor through tensor_device() like the collectives'.
  void send(const torch::Tensor& tensor, int64_t peer);
  virtual CollectiveHandle send_async(const torch::Tensor& tensor, int64_t peer) = 0;
  void recv(torch::Tensor& tensor, int64_t peer);
  virtual CollectiveHandle recv_async(torch::Tensor tensor, int64_t peer) = 0;

  // ---- variable-size bytes (serialized state), each [collective]: sizes are gathered first,
  // then the bytes padded to the largest; costs two collectives.
  // Every rank's `bytes`, by rank, on every rank.
  std::vector<std::string> all_gather_bytes(const std::string& bytes);
  // Every rank's `bytes`, by rank, on `root`; an empty vector on the other ranks.
  std::vector<std::string> gather_bytes(const std::string& bytes, int64_t root = 0);

  // How reductions (all_reduce, reduce, reduce_scatter) of CPU bfloat16 tensors travel:
  // "native" (2 bytes an element, summed in bfloat16) or "float32" (converted, reduced, converted
  // back: 4 bytes an element). Note [bfloat16 over Gloo]. The same on every rank.
  virtual std::string bf16_reduction() const = 0;
  // Whether all_reduce and reduce of CPU tensors go through shared memory in this group
  // (CommunicatorOptions::shared_memory, every rank on this host).
  virtual bool reduces_through_shared_memory() const { return false; }
  // Whether volt's ring collectives and the collectives through shared memory run on a thread of
  // the communicator's own (CommunicatorOptions::ring_thread).
  virtual bool runs_on_a_ring_thread() const { return false; }
  // Zeroed flat buffers (numels[i] elements of dtypes[i], on the CPU) for tensors this group will
  // all_reduce: where all_reduce goes through shared memory, in a segment every rank has mapped,
  // so that it reduces them in place, without a copy in or out (Note [all_reduce in place
  // through shared memory]: DDP's buckets); plain tensors otherwise. Every rank asks for the same
  // buffers. [collective]
  virtual std::vector<torch::Tensor> allocate_buffers(const std::vector<int64_t>& numels,
                                                      const std::vector<c10::ScalarType>& dtypes);

  // ---- sub-groups
  // A communicator over `ranks` (ranks of this communicator; members are ordered by rank).
  // Every rank of this communicator calls it, with the same list, in the same order as its other
  // new_group calls; members get the sub-group, non-members nullptr. Only members communicate:
  // the sub-group's rendezvous is bounded by the timeout like a collective.
  virtual std::shared_ptr<Communicator> new_group(std::vector<int64_t> ranks) = 0;
  // The ranks that share this process's node, and the lowest rank of every node (the "node
  // leaders"; nullptr on other ranks). `node_rank` is this process's node; ranks need not be
  // numbered node by node. One all_gather, then new_group for every node and for the leaders.
  // [collective]
  struct NodeGroups {
    std::shared_ptr<Communicator> local;
    std::shared_ptr<Communicator> leaders;
  };
  NodeGroups node_groups(int64_t node_rank);
  // PyTorch's dist.new_subgroups(group_size): the ranks split into groups of `group_size`
  // consecutive ranks ([0, g), [g, 2g), ...); returns this rank's group. `group_size` must divide
  // size() (ConfigurationError otherwise, on every rank). Every rank creates every group, in rank
  // order, through new_group, so each group has its own counters. [collective]
  std::shared_ptr<Communicator> new_subgroups(int64_t group_size);

  // ---- failures
  // Best effort, not a collective: records in the store why this rank is about to fail, so that
  // the other ranks' failed collectives can name it and quote `message`.
  virtual void report_failure(const std::string& message) = 0;

  // ---- accounting (virtual for a communicator in front of another: Note [Device tensors on Gloo])
  virtual CollectiveCounters counters() const;
  virtual void reset_counters();

 protected:
  Communicator(int64_t rank, int64_t size, std::vector<int64_t> global_ranks, std::chrono::milliseconds timeout);
  // Counts a collective about to start (thread-safe).
  void count(CollectiveKind kind, int64_t bytes);
  // Adds to a collective's sent bytes (CollectiveCount::sent_bytes; thread-safe).
  void count_sent(CollectiveKind kind, int64_t bytes);
  // "Communicator (rank 1 of 4)" and, in a sub-group, "(rank 1 of 2, global rank 3)".
  std::string describe() const;

 private:
  int64_t rank_, size_;
  std::vector<int64_t> global_ranks_;
  std::chrono::milliseconds timeout_;
  mutable std::mutex counters_mutex_;
  CollectiveCounters counters_;
};

}  // namespace volt

#pragma once
// Note [Collectives through shared memory]
// Ranks on one host need not exchange gradients through TCP loopback (Gloo): kernel copies,
// socket buffers and a syscall per chunk. A SharedMemoryGroup maps one segment that every rank
// of the group shares, and reduces through it:
//   segment  a header (per rank: its pid and three counters, each rank's on a cache line of its
//            own), one slot of `slot_bytes` per rank, and one result slot;
//   a chunk  (half a slot) of an all_reduce takes three steps, each closed by every rank's counter
//            reaching the chunk's generation: each rank copies its chunk into its slot
//            ("written"); each rank reduces its 1/size slice of the chunk over all slots, in rank
//            order, into the result ("reduced"); each rank copies out the result ("done"); a
//            reduce copies it out on the root only. Pipelined: a call's chunks take the two
//            halves of the slots and of the result by turns, so a rank copies its next chunk into
//            one half while slower ranks still copy the last one out of the other. reduce_scatter: each rank reduces
//            only what it keeps, straight into its output (Note [reduce_scatter through shared memory]), two steps.
//            all_gather: each rank copies its chunk into its slot ("written"), then every slot's chunk to its place in
//            the output ("done"). broadcast: the root copies the chunk into its slot ("written"), the others copy it
//            out ("done"). A rank writes its slot again only once every rank is done with the previous chunk.
// A tensor in buffers the group handed out (allocate_buffers: a segment of its own, a region per
// rank) is all_reduced in place instead, with no copy through the slots (Note [all_reduce in
// place through shared memory] in shared_memory_buffers.cpp).
// Every element is reduced once, by one rank, in rank order, so every rank gets the same bits,
// and the order is the same at every size. float16 and bfloat16 are summed in float32. Mean is
// the sum divided by the group's size where it is reduced (once per element, by the rank that
// sums it), not by each rank before or after: a pass over the tensor fewer on every rank.
// Each segment (shared_segment.h) is named per run and group (rank 0's pid and a random nonce), created by rank 0,
// opened by the others, and its name removed as soon as every rank has mapped it: from then on
// nothing is left behind whatever kills the processes (the kernel frees the memory with the last
// mapping). A segment whose creator died before that point is removed by the next group a rank 0
// of this host creates (its pid is in the name). Two jobs never share a segment: the name holds a
// nonce that the joining ranks check in the header.
// Each call records its kind, size, dtype, op and root beside its first "written": ranks that disagree (calls
// in another order, tensors of other sizes) fail naming the rank and both calls, rather than
// mixing two collectives. A wait for the other ranks is bounded by the timeout; a rank whose process is gone (checked
// every 100 ms), that failed or that closed its end of the group fails the wait at once, naming
// it. After a failure the group refuses further collectives.
//
// Not thread-safe: one thread issues the collectives, in the same order on every rank.
// Private to distributed/.
#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "distributed/reduce_op.h"
#include "distributed/transports/shared_segment.h"

namespace volt {

class SharedMemoryGroup {
 public:
  // Every rank's bytes, by rank: an all_gather over the group's other transport. [collective]
  using Exchange = BytesExchange;

  static constexpr size_t kDefaultSlotBytes = size_t{4} << 20;

  // The group's segment, mapped on every rank; null on every rank when the ranks are not all on
  // one host (their `host` ids differ; empty: host_id()) or shared memory cannot be had here
  // (`why_not` says why: e.g. /dev/shm cannot hold the segment, which is reserved when it is
  // created). `describe` names the group in errors. [collective]
  static std::unique_ptr<SharedMemoryGroup> join(const Exchange& exchange, int64_t rank, int64_t size,
                                                 std::chrono::milliseconds timeout, const std::string& describe,
                                                 size_t slot_bytes = kDefaultSlotBytes, std::string* why_not = nullptr,
                                                 const std::string& host = "");
  ~SharedMemoryGroup();
  SharedMemoryGroup(const SharedMemoryGroup&) = delete;
  SharedMemoryGroup& operator=(const SharedMemoryGroup&) = delete;

  // Whether the reductions (all_reduce, reduce, reduce_scatter) take `tensor` with `op`: a dense
  // CPU tensor of float32, float64, float16 or bfloat16 with any op, or of int32 or int64 with
  // Sum, Max or Min.
  static bool accepts(const torch::Tensor& tensor, ReduceOp op);
  // Whether the data movements (broadcast, all_gather) take `tensor`: a dense CPU tensor, any dtype.
  static bool moves(const torch::Tensor& tensor);
  // Reduces `tensor` (contiguous) over the group, in place; where it lies in buffers of
  // allocate_buffers, without a copy through the slots (Note [all_reduce in place through shared
  // memory]). [collective]
  void all_reduce(torch::Tensor& tensor, ReduceOp op);
  // Zeroed 1-d tensors of numels[i] elements of dtypes[i], in a segment every rank of the group
  // maps, that all_reduce reduces in place (a tensor inside one of them, at the same place on
  // every rank). Each keeps the segment mapped; the group may go first. Empty on every rank when
  // the segment cannot be had (`why_not` says why). [collective, over `exchange`]
  std::vector<torch::Tensor> allocate_buffers(const Exchange& exchange, const std::vector<int64_t>& numels,
                                              const std::vector<c10::ScalarType>& dtypes,
                                              std::string* why_not = nullptr);
  // Reduces `tensor` (contiguous) over the group into `root`'s; the others' are left as they
  // were. [collective]
  void reduce(torch::Tensor& tensor, int64_t root, ReduceOp op);
  // The reduction over the group of `input` (contiguous, of sum(counts) elements) cut into one run
  // per rank, counts[r] elements each in rank order: this rank's run into `output` (contiguous,
  // counts[rank()] elements). [collective]
  void reduce_scatter(const torch::Tensor& input, torch::Tensor& output, const std::vector<int64_t>& counts,
                      ReduceOp op);
  // Every rank's `input` (contiguous, counts[r] elements on rank r) into `output` (contiguous,
  // sum(counts) elements), in rank order. [collective]
  void all_gather(const torch::Tensor& input, torch::Tensor& output, const std::vector<int64_t>& counts);
  // `root`'s `tensor` (contiguous) into every rank's, in place. [collective]
  void broadcast(torch::Tensor& tensor, int64_t root);
  // Returns once every rank has called it. [collective]
  void barrier();
  // Gives up on the group: peers waiting for this rank fail at once, naming it; no more
  // collectives here. For a caller whose own part of a collective failed elsewhere.
  void abandon();
  // A check that ends a wait for peers: while it returns "", waits go on; once it returns a
  // reason (a hang the monitor found, Note [Diagnosing a hang]), the waiting collective fails
  // with it. Checked every ~100 ms of waiting. Set before the first collective.
  void set_interruption(std::function<std::string()> interruption) { interruption_ = std::move(interruption); }

  int64_t rank() const { return rank_; }
  int64_t size() const { return size_; }
  // This host's id: the kernel's boot id and the host name.
  static std::string host_id();

 private:
  struct Header;
  struct RankState;
  struct Buffers;
  struct Registry;
  SharedMemoryGroup(int64_t rank, int64_t size, std::chrono::milliseconds timeout, std::string describe,
                    size_t slot_bytes, std::unique_ptr<SharedSegment> segment);
  static size_t header_bytes_for(int64_t size);
  RankState& state(int64_t rank) const;
  char* slot(int64_t rank) const;
  char* result() const;
  // slot(r), as reduce_into's source.
  std::function<char*(int64_t)> slots() const;
  // This rank's part [begin, end) of `n` elements of `element` bytes, split evenly in whole cache lines.
  std::pair<int64_t, int64_t> slice_of(int64_t n, int64_t element) const;
  // The buffers `tensor` lies in, and its byte offset in this rank's region (null, -1: none).
  std::pair<const Buffers*, int64_t> find_buffer(const torch::Tensor& tensor) const;
  void all_reduce_in_place(torch::Tensor& tensor, ReduceOp op, const Buffers& buffers, int64_t offset);
  // Waits until every rank's counter `which` (0 written, 1 reduced, 2 done) reaches `generation`.
  void wait_for_all(int which, int64_t generation, const char* what);
  // Reduces elements [begin, begin + count) of every rank's `source` (its slot, or its buffer), in
  // rank order, into the `count` elements at `destination`.
  void reduce_into(c10::ScalarType dtype, ReduceOp op, int64_t begin, int64_t count, char* destination,
                   const std::function<char*(int64_t rank)>& source);
  // The reduction of `numel` elements at `data` over the group, a chunk at a time: `take(offset,
  // n, reduced)` copies what it needs of elements [offset, offset + n) of the reduction, at
  // `reduced` (a half of result()).
  // `root`: the call's root rank, -1 for none.
  void reduce_chunks(int32_t kind, int64_t root, const char* data, int64_t numel, c10::ScalarType dtype, ReduceOp op,
                     const std::function<void(int64_t offset, int64_t n, const char* reduced)>& take);
  // Starts a chunk: waits until every rank is done with the previous one (`alternates`: a later
  // chunk of a call whose chunks take halves by turns, with the one before that); the first
  // chunk of a call records the call (`op` and `root`: -1 where the kind has none; `buffers` and
  // `offset`: an all_reduce in place). A call's first chunk never alternates: once every rank is
  // done with the previous call, none still reads the descriptions this one overwrites.
  int64_t begin_chunk(bool first, int32_t kind, int64_t numel, int32_t dtype, int32_t op, int32_t root,
                      int64_t buffers = -1, int64_t offset = -1, bool alternates = false);
  // Marks this rank's step `which` (0 written, 1 reduced, 2 done) of chunk `generation`.
  void finish_step(int which, int64_t generation);
  // Records this rank's call, then (once every rank has written) checks that every rank made the
  // same one (Note [Collectives through shared memory]).
  void describe_call(int32_t kind, int64_t numel, int32_t dtype, int32_t op, int32_t root, int64_t buffers,
                     int64_t offset);
  void check_calls_agree(int32_t kind);
  void check_usable() const;
  [[noreturn]] void fail(const std::string& message);

  int64_t rank_, size_;
  std::chrono::milliseconds timeout_;
  std::string describe_;
  std::function<std::string()> interruption_;
  size_t slot_bytes_;
  std::unique_ptr<SharedSegment> segment_;
  size_t header_bytes_;
  std::shared_ptr<Registry> registry_;
  int64_t next_buffers_id_ = 0;
  int64_t generation_ = 0;
  bool broken_ = false;
};

}  // namespace volt

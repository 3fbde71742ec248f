#pragma once
// Note [Inline all_reduce]: c10d's Gloo process group runs every collective on one of its worker
// threads and the caller waits on a future, so even a 1 KB all_reduce costs at least two thread
// hand-offs on top of Gloo's own. On a 2-vCPU VM, where waking an idle thread takes ~100-500 us,
// that doubles or triples the cost of latency-bound collectives (measured with two processes on
// 127.0.0.1: raw gloo::allreduce of 400 KB 0.59 ms, through ProcessGroupGloo ~1.5 ms). Small
// all_reduces (DDP's first bucket, whole small models, metric and stop-decision syncs) are
// therefore run by volt on the calling thread, on a second Gloo context of the same group whose
// sockets are in Gloo's sync mode (the caller reads them itself, so Gloo's event-loop thread is
// not involved either); larger ones stay asynchronous on the process group, so that they overlap
// with backward. Timeouts: Gloo sets the context's timeout on the sockets ("Read timeout").
// reduce takes the same path; bfloat16 reductions take it at any size (Note [bfloat16 over
// Gloo]). reduce_scatter does not: it is a ring of its own (Note [Ring reduce_scatter]).
//
// Both contexts see every rank's collectives in the same order (which path a call takes depends
// only on its dtype, op and size, which match across ranks), and neither waits for the other, so
// mixing them cannot deadlock. Private to distributed/ (it includes c10d and Gloo).
#include <chrono>
#include <memory>
#include <mutex>

#include "distributed/c10d_compat.h"
#include "distributed/reduce_op.h"

namespace volt {

class InlineGlooAllReduce {
 public:
  // False when this build cannot link Gloo itself (a LibTorch that embeds its own copy of Gloo):
  // then every all_reduce goes through the process group.
  static bool compiled_in();

  // Connects a full mesh among the `size` ranks through `store` (its own key space), bounded by
  // `timeout`, which also bounds every collective. Throws what Gloo throws.
  InlineGlooAllReduce(const c10::intrusive_ptr<c10d::Store>& store, int64_t rank, int64_t size,
                      const std::shared_ptr<gloo::transport::Device>& device, std::chrono::milliseconds timeout,
                      int64_t max_bytes);
  ~InlineGlooAllReduce();

  // Whether run() takes this all_reduce: a contiguous CPU tensor of float, double, int32 or int64
  // of at most max_bytes, or of bfloat16 of any size (Note [bfloat16 over Gloo]; Mean is Sum
  // here; the caller divides).
  bool accepts(const torch::Tensor& tensor, ReduceOp op) const;
  // Reduces `tensor` in place over every rank, on this thread. Throws gloo's exception on a
  // timeout or a lost peer, and then closes this rank's connections, so that peers waiting on it
  // fail at once too; later calls throw DistributedError.
  void run(torch::Tensor& tensor, ReduceOp op);

 private:
  struct Context;
  std::unique_ptr<Context> context_;
  int64_t max_bytes_;
  std::mutex mutex_;  // collectives on one context are issued one at a time
};

}  // namespace volt

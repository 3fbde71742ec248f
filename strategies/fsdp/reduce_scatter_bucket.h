#pragma once
// fairscale's ReduceScatterBucketer (FSDP's bucket_cap_mb): small units' flat gradients wait in a
// shared bucket and are reduce-scattered together, one collective instead of one per unit. A
// unit's flat gradient holds N chunks (one per rank); the bucket lays the waiting gradients side
// by side per chunk ([N, s1 + s2 + ...]), so that chunk r of the bucket is every unit's chunk r,
// and one reduce-scatter hands each rank its part of each. Every element is summed in the same
// ring order as alone, so bucketing changes no bit of the result. A gradient of cap_bytes or
// more goes alone at once; the bucket is reduced when the next gradient would overflow it, and at
// flush() (the strategy's end of backward). Every rank buckets the same units in the same order.
//
// A waiting gradient is not copied out of its parameters until its bucket is sent: each unit
// writes its flat gradient straight into its columns of the bucket's buffer then (a FlatGradient's
// `write`), so that a bucketed gradient is copied once, as a lone one is (a flat copy per unit,
// then their concatenation, cost this machine's FSDP benchmark 14% of its step).
//
// Reduce-scatters run on the communicator's ring thread (Note [Ring collectives off the calling
// thread]) while backward goes on, as fairscale's and PyTorch's run on a side stream: a launched
// one's `done` runs, in launch order, once it completed (looked at whenever another gradient
// comes in) or at flush(), which waits for all. Its flat gradient stays alive until then.
#include <torch/torch.h>

#include <deque>
#include <functional>
#include <vector>

#include "distributed/communicator.h"

namespace volt::fsdp {

// A unit's flat gradient, written where the bucket puts it.
struct FlatGradient {
  int64_t numel = 0;                   // size()·m elements: m per rank (the padded flat gradient)
  torch::Dtype dtype = torch::kFloat;  // the dtype it travels and is reduced in
  torch::Device device = torch::kCPU;
  // Writes the gradient into `rows` ([size(), m] of `dtype`, row r = chunk r; possibly a strided
  // view into a bucket) and lets the gradient it was made from go.
  std::function<void(torch::Tensor rows)> write;
};

class ReduceScatterBucket {
 public:
  // Reduce-scatters over `communicator` (the units' shard group); cap_bytes <= 0: no bucket (every
  // gradient reduced at once, alone). `replicas`: the group whose ranks hold the same shards; null:
  // none. With a shard group of one rank (NO_SHARD, Note [NO_SHARD] in fsdp_strategy.h) gradients
  // are all-reduced (summed) over it instead of reduce-scattered; with a larger one (HYBRID_SHARD,
  // Note [HYBRID_SHARD]) each reduce-scattered result is all-reduced over it too, at flush(), in
  // launch order on every rank (so the shard group's reduces complete only there).
  ReduceScatterBucket(Communicator& communicator, int64_t cap_bytes, Communicator* replicas = nullptr);

  // Reduce-scatters `gradient` (the sum over ranks), now or with the bucket, and calls `done` with
  // this rank's m reduced elements once that completed (at flush() at the latest). [collective]
  void reduce(FlatGradient gradient, std::function<void(torch::Tensor)> done);
  // The same for a gradient already flat (size()·m elements, contiguous).
  void reduce(torch::Tensor flat, std::function<void(torch::Tensor)> done);
  // Reduces what waits and waits for every reduce in flight, calling their `done`. [collective]
  void flush();
  bool empty() const { return waiting_.empty() && in_flight_.empty(); }
  // Drops what waits or is in flight, unreduced (a run that failed mid-backward; its units are
  // going away; a reduce in flight completes on the ring thread with nobody waiting for it).
  void discard() {
    waiting_.clear();
    waiting_bytes_ = 0;
    in_flight_.clear();
  }

 private:
  struct Waiting {
    FlatGradient gradient;
    std::function<void(torch::Tensor)> done;
  };
  struct Carried {
    int64_t m = 0;  // its elements per rank
    std::function<void(torch::Tensor)> done;
  };
  // One reduce-scatter in flight: the gradients it carries, in bucket order.
  struct InFlight {
    CollectiveHandle handle;  // its result: every carried gradient's m elements, side by side
    std::vector<Carried> carried;
  };

  // Writes `waiting` side by side per chunk into one buffer and launches it.
  void send(std::vector<Waiting> waiting);
  void send_waiting();  // sends the bucket of waiting gradients
  void launch(torch::Tensor input, std::vector<Carried> carried);
  // Calls `done` for launched reduces that completed, in launch order (waiting for all with
  // `wait_all`).
  void complete(bool wait_all);

  Communicator& communicator_;
  int64_t cap_bytes_;
  Communicator* replicas_;
  std::vector<Waiting> waiting_;
  int64_t waiting_bytes_ = 0;
  std::deque<InFlight> in_flight_;
};

}  // namespace volt::fsdp

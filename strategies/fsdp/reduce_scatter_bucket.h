#pragma once
// fairscale's ReduceScatterBucketer (FSDP's bucket_cap_mb): small units' flat gradients wait in a
// shared bucket and are reduce-scattered together, one collective instead of one per unit. A
// unit's flat gradient holds N chunks (one per rank); the bucket lays the waiting gradients side
// by side per chunk ([N, s1 + s2 + ...]), so that chunk r of the bucket is every unit's chunk r,
// and one reduce-scatter hands each rank its part of each. Every element is summed in the same
// ring order as alone, so bucketing changes no bit of the result. A gradient of cap_bytes or
// more goes alone at once; the bucket is reduced when the next gradient would overflow it, and at
// flush() (the strategy's end of backward). Every rank buckets the same units in the same order.
#include <torch/torch.h>

#include <functional>
#include <vector>

#include "distributed/communicator.h"

namespace volt::fsdp {

class ReduceScatterBucket {
 public:
  // cap_bytes <= 0: no bucket (every gradient reduced at once, alone).
  ReduceScatterBucket(Communicator& communicator, int64_t cap_bytes);

  // Reduce-scatters `flat` (size()·m elements; the sum over ranks), now or with the bucket, and
  // calls `done` with this rank's m reduced elements. [collective]
  void reduce(torch::Tensor flat, std::function<void(torch::Tensor)> done);
  // Reduces what waits. [collective]
  void flush();
  bool empty() const { return waiting_.empty(); }
  // Drops what waits, unreduced (a run that failed mid-backward; its units are going away).
  void discard() {
    waiting_.clear();
    waiting_bytes_ = 0;
  }

 private:
  struct Waiting {
    torch::Tensor flat;
    std::function<void(torch::Tensor)> done;
  };

  Communicator& communicator_;
  int64_t cap_bytes_;
  std::vector<Waiting> waiting_;
  int64_t waiting_bytes_ = 0;
};

}  // namespace volt::fsdp

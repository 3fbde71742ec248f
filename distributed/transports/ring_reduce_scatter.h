#pragma once
// Note [Ring reduce_scatter]: c10d's Gloo backend (1.13 and 2.x) has no reduce_scatter, and
// building one from all_reduce (reduce everything, keep one chunk) puts an all_reduce's traffic,
// ~2·(n−1)/n of the input per rank, on the wire. FSDP and ZeRO reduce-scatter every gradient,
// so volt runs the ring algorithm itself over the process group's point-to-point send/recv:
// n−1 steps; in step s rank r sends its running sum of chunk (r−s−1) mod n to rank r+1 and
// receives the running sum of chunk (r−s−2) mod n from rank r−1, to which it adds its own part.
// After the last step rank r holds chunk r summed over every rank, having sent every chunk but
// its own once: (n−1)/n of the input when chunks are equal. Chunks may differ in size (ZeRO's
// owners hold whole parameters; ring_chunks.h): a step then takes as long as its largest message,
// and an empty chunk costs nothing. The sums are computed by LibTorch, so any dtype reduces
// natively (bfloat16 too, each pairwise sum rounded to bfloat16). NCCL's reduce_scatter is the
// same ring on the GPU.
//
// It runs on the thread that calls it (the communicator's ring thread, Note [Ring collectives off
// the calling thread]): each step's send and receive are posted together, then waited for under
// the timeout. Private to distributed/.
#include <chrono>
#include <vector>

#include "distributed/c10d_compat.h"
#include "distributed/transports/c10d_entry.h"
#include "distributed/reduce_op.h"

namespace volt {

// `input` (contiguous) is `counts.size()` (the group's size) consecutive chunks, rank r's of
// counts[r] elements, reduced over the ranks of `group`; `output` (contiguous, counts[rank]
// elements, input's dtype) gets chunk `rank` of the result. Mean divides by the group's size at
// the end. `entry`: the group's (Note [Entering c10d from several threads]). Returns the bytes
// this rank sent. Throws what c10d throws (a timeout, a lost peer).
int64_t ring_reduce_scatter(compat::C10dBackend& group, C10dEntry& entry, int64_t rank,
                            const std::vector<int64_t>& counts, torch::Tensor& output, const torch::Tensor& input,
                            ReduceOp op, std::chrono::milliseconds timeout);

}  // namespace volt

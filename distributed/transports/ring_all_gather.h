#pragma once
// Note [Ring all_gather in place]: ZeRO's parameter sync. After a sharded optimizer step every
// rank holds the new values of its own parameters only; when those sit in one flat buffer laid
// out by owner (rank 0's chunk, then rank 1's, ...; strategies/sharded/owner_buffers.h), one ring
// all-gather in that buffer gives every rank the whole model: n−1 steps; in step s rank r sends
// chunk (r−s) mod n to rank r+1 and receives chunk (r−s−1) mod n from rank r−1, straight into
// its place. Every rank sends every chunk but one once (the payload of one broadcast per owner,
// all links busy at once), and nothing is copied. Chunks may differ in size (owners hold whole
// parameters); an empty chunk costs nothing. c10d's all_gather cannot do this: it needs equal
// sizes and gathers into a buffer of its own first (Gloo) or a separate output.
//
// It runs on the thread that calls it (the communicator's ring thread, Note [Ring collectives off
// the calling thread]): each step's send and receive are posted together, then waited for under
// the timeout. Bytes are moved as they are, so any dtype travels. Private to distributed/.
#include <chrono>
#include <vector>

#include "distributed/c10d_compat.h"
#include "distributed/transports/c10d_entry.h"

namespace volt {

// `flat` (contiguous) is `counts.size()` (the group's size) consecutive chunks, rank r's of
// counts[r] elements; on entry chunk `rank` holds this rank's values, on return every chunk holds
// its rank's values. `entry`: the group's (Note [Entering c10d from several threads]). Returns
// the bytes this rank sent. Throws what c10d throws (a timeout, a lost
// peer).
int64_t ring_all_gather_in_place(compat::C10dBackend& group, C10dEntry& entry, int64_t rank,
                                 const std::vector<int64_t>& counts, torch::Tensor& flat,
                                 std::chrono::milliseconds timeout);

}  // namespace volt

#pragma once
// Communicator's uneven-chunk collectives (all_gather_chunks, reduce_scatter_chunks) built from
// its equal-chunk ones: every chunk is copied into a slot as large as the largest chunk, the
// collective runs on the padded buffer, and the result is copied back. For backends whose own
// all_gather / reduce_scatter are the fast path (NCCL): volt's point-to-point rings serve Gloo.
// The padding costs (n·largest − total) elements on the wire and two copies (equal chunks need
// none: they go to the equal-chunk collective as they are, the all-gather with one copy of this
// rank's chunk). Private to
// distributed/; each function is [collective] and completes before it returns.
#include <torch/torch.h>

#include <vector>

#include "distributed/communicator.h"

namespace volt {

// Communicator::all_gather_chunks's contract, through all_gather_into.
void all_gather_chunks_by_padding(Communicator& communicator, torch::Tensor& flat, const std::vector<int64_t>& counts);
// Communicator::reduce_scatter_chunks's contract, through reduce_scatter_into.
void reduce_scatter_chunks_by_padding(Communicator& communicator, torch::Tensor& output, const torch::Tensor& input,
                                      const std::vector<int64_t>& counts, ReduceOp op);

}  // namespace volt

#include "distributed/transports/padded_chunks.h"

#include <algorithm>
#include <functional>

#include "distributed/transports/ring_chunks.h"

namespace volt {

namespace {

bool equal(const std::vector<int64_t>& counts) {
  return std::adjacent_find(counts.begin(), counts.end(), std::not_equal_to<>()) == counts.end();
}

// `flat`'s chunks, each at the start of a slot of chunks.largest() elements (the rest zero).
torch::Tensor padded(const ring::Chunks& chunks, const torch::Tensor& flat) {
  const int64_t slot = chunks.largest();
  auto slots = torch::zeros({chunks.size() * slot}, flat.options());
  for (int64_t r = 0; r < chunks.size(); ++r) slots.narrow(0, r * slot, chunks.count(r)).copy_(chunks.of(flat, r));
  return slots;
}

}  // namespace

void all_gather_chunks_by_padding(Communicator& communicator, torch::Tensor& flat, const std::vector<int64_t>& counts) {
  const ring::Chunks chunks(counts);
  const int64_t slot = chunks.largest(), rank = communicator.rank();
  if (slot == 0) return;
  const auto buffer = flat.view({-1});
  if (equal(counts)) {  // nothing to pad: the collective's own layout
    communicator.all_gather_into(buffer, chunks.of(buffer, rank).clone());
    return;
  }
  auto mine = torch::zeros({slot}, flat.options());
  mine.narrow(0, 0, chunks.count(rank)).copy_(chunks.of(buffer, rank));
  auto slots = torch::empty({chunks.size() * slot}, flat.options());
  communicator.all_gather_into(slots, mine);
  for (int64_t r = 0; r < chunks.size(); ++r) {
    if (r != rank) chunks.of(buffer, r).copy_(slots.narrow(0, r * slot, chunks.count(r)));
  }
}

void reduce_scatter_chunks_by_padding(Communicator& communicator, torch::Tensor& output, const torch::Tensor& input,
                                      const std::vector<int64_t>& counts, ReduceOp op) {
  const ring::Chunks chunks(counts);
  if (chunks.largest() == 0) return;
  if (equal(counts)) {
    communicator.reduce_scatter_into(output.view({-1}), input.reshape({-1}), op);
    return;
  }
  auto reduced = torch::empty({chunks.largest()}, input.options());
  communicator.reduce_scatter_into(reduced, padded(chunks, input.reshape({-1})), op);
  output.view({-1}).copy_(reduced.narrow(0, 0, chunks.count(communicator.rank())));
}

}  // namespace volt

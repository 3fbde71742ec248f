// See Note [Ring all_gather in place] in ring_all_gather.h.
#include "distributed/transports/ring_all_gather.h"

#include "core/error.h"
#include "distributed/transports/ring_chunks.h"

namespace volt {

int64_t ring_all_gather_in_place(compat::C10dBackend& group, C10dEntry& entry, int64_t rank,
                                 const std::vector<int64_t>& counts, torch::Tensor& flat,
                                 std::chrono::milliseconds timeout) {
  const ring::Chunks chunks(counts);
  const int64_t size = chunks.size();
  VOLT_INTERNAL_ASSERT(flat.is_contiguous() && flat.numel() == chunks.total(),
                       "ring_all_gather_in_place: a contiguous buffer of sum(counts) elements");
  const auto buffer = flat.view({-1});
  const int right = static_cast<int>((rank + 1) % size), left = static_cast<int>((rank + size - 1) % size);
  int64_t sent = 0;
  for (int64_t step = 0; step < size - 1; ++step) {
    const auto outgoing = chunks.of(buffer, rank - step);
    ring::exchange(group, entry, right, outgoing, left, chunks.of(buffer, rank - step - 1), timeout);
    sent += outgoing.numel() * static_cast<int64_t>(outgoing.element_size());
  }
  return sent;
}

}  // namespace volt

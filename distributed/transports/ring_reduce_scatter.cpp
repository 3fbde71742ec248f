// See Note [Ring reduce_scatter] in ring_reduce_scatter.h.
#include "distributed/transports/ring_reduce_scatter.h"

#include "core/error.h"
#include "distributed/transports/ring_chunks.h"

namespace volt {

namespace {

// `into` ∘= `part`, elementwise.
void combine(torch::Tensor& into, const torch::Tensor& part, ReduceOp op) {
  switch (op) {
    case ReduceOp::Max: torch::maximum_out(into, into, part); return;
    case ReduceOp::Min: torch::minimum_out(into, into, part); return;
    case ReduceOp::Sum:
    case ReduceOp::Mean: break;
  }
  into.add_(part);
}

}  // namespace

int64_t ring_reduce_scatter(compat::C10dBackend& group, C10dEntry& entry, int64_t rank,
                            const std::vector<int64_t>& counts, torch::Tensor& output, const torch::Tensor& input,
                            ReduceOp op, std::chrono::milliseconds timeout) {
  const ring::Chunks chunks(counts);
  const int64_t size = chunks.size();
  VOLT_INTERNAL_ASSERT(input.is_contiguous() && output.is_contiguous() && input.numel() == chunks.total() &&
                           output.numel() == chunks.count(rank),
                       "ring_reduce_scatter: contiguous input of sum(counts) and output of counts[rank] elements");
  const auto flat_input = input.view({-1});
  auto flat_output = output.view({-1});
  if (size == 1 || chunks.total() == 0) {
    flat_output.copy_(chunks.of(flat_input, rank));
    if (op == ReduceOp::Mean) output.div_(static_cast<double>(size));
    return 0;
  }
  const int right = static_cast<int>((rank + 1) % size), left = static_cast<int>((rank + size - 1) % size);
  // The running sum this rank sends, and the one it receives: at most two chunks of scratch,
  // whatever n; the last step receives straight into `output`, unless `output` is a view of the
  // input (its own part must still be read then).
  const bool receive_into_output = !output.is_alias_of(input);
  torch::Tensor outgoing = chunks.of(flat_input, rank - 1);
  torch::Tensor scratch[2];
  int64_t sent = 0;
  for (int64_t step = 0; step < size - 1; ++step) {
    const int64_t arriving = rank - step - 2;  // the chunk whose running sum comes from the left
    torch::Tensor incoming;
    if (step == size - 2 && receive_into_output) {
      incoming = flat_output;  // chunk `rank`: what arrives, plus this rank's part, is the result
    } else {
      auto& buffer = scratch[step % 2];  // the other one may still be `outgoing`
      if (!buffer.defined()) buffer = torch::empty({chunks.largest()}, output.options());
      incoming = buffer.narrow(0, 0, chunks.count(arriving));
    }
    ring::exchange(group, entry, right, outgoing, left, incoming, timeout);
    sent += outgoing.numel() * static_cast<int64_t>(outgoing.element_size());
    combine(incoming, chunks.of(flat_input, arriving), op);
    outgoing = incoming;
  }
  if (!receive_into_output) flat_output.copy_(outgoing);
  if (op == ReduceOp::Mean) output.div_(static_cast<double>(size));
  return sent;
}

}  // namespace volt

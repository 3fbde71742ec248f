// See Note [Ring reduce_scatter] in ring_reduce_scatter.h.
#include "distributed/ring_reduce_scatter.h"

#include "core/error.h"

namespace volt {

namespace {

// The point-to-point tag of the ring's messages. Gloo matches messages by peer and tag in the
// order they were posted, and the ring waits for each step, so one tag serves every call; c10d's
// own collectives use slots of their own and never meet it.
constexpr int kRingTag = 0x766f6c74;  // "volt"

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

void wait(const c10::intrusive_ptr<c10d::Work>& work, std::chrono::milliseconds timeout) {
  work->wait(timeout);
}

}  // namespace

int64_t ring_reduce_scatter(compat::C10dBackend& group, int64_t rank, int64_t size, torch::Tensor& output,
                            const torch::Tensor& input, ReduceOp op, std::chrono::milliseconds timeout) {
  VOLT_INTERNAL_ASSERT(input.is_contiguous() && output.is_contiguous() && input.numel() == size * output.numel(),
                       "ring_reduce_scatter: contiguous input of size x output elements");
  const int64_t m = output.numel();
  const auto flat_input = input.view({-1});
  auto chunk = [&](int64_t index) { return flat_input.narrow(0, ((index % size) + size) % size * m, m); };
  if (size == 1 || m == 0) {
    output.view({-1}).copy_(chunk(rank));
    if (op == ReduceOp::Mean) output.div_(static_cast<double>(size));
    return 0;
  }
  const int right = static_cast<int>((rank + 1) % size), left = static_cast<int>((rank + size - 1) % size);
  // The running sum this rank sends, and the one it receives: two chunks of scratch, whatever n.
  torch::Tensor outgoing = chunk(rank - 1), incoming = torch::empty({m}, output.options());
  torch::Tensor scratch;  // becomes the second buffer once `outgoing` is ours to overwrite
  int64_t sent = 0;
  for (int64_t step = 0; step < size - 1; ++step) {
    std::vector<at::Tensor> receive_into{incoming}, send_from{outgoing.contiguous()};
    auto receiving = group.recv(receive_into, left, kRingTag);
    auto sending = group.send(send_from, right, kRingTag);
    wait(sending, timeout);
    wait(receiving, timeout);
    sent += m * static_cast<int64_t>(outgoing.element_size());
    combine(incoming, chunk(rank - step - 2), op);
    // What arrived, plus this rank's part, is what goes on; the buffer just sent is free again.
    if (!scratch.defined()) scratch = torch::empty({m}, output.options());
    else scratch = outgoing;
    outgoing = incoming;
    incoming = scratch;
  }
  output.view({-1}).copy_(outgoing);
  if (op == ReduceOp::Mean) output.div_(static_cast<double>(size));
  return sent;
}

}  // namespace volt

#include "strategies/fsdp/reduce_scatter_bucket.h"

#include "core/collective_site.h"
#include "core/error.h"

namespace volt::fsdp {

ReduceScatterBucket::ReduceScatterBucket(Communicator& communicator, int64_t cap_bytes, Communicator* replicas)
    : communicator_(communicator), cap_bytes_(cap_bytes), replicas_(replicas) {}

void ReduceScatterBucket::reduce(FlatGradient gradient, std::function<void(torch::Tensor)> done) {
  const int64_t n = communicator_.size();
  VOLT_INTERNAL_ASSERT(gradient.numel % n == 0, "a flat gradient of size() chunks");
  complete(/*wait_all=*/false);
  const auto bytes = gradient.numel * static_cast<int64_t>(c10::elementSize(gradient.dtype));
  if (!waiting_.empty() && (waiting_bytes_ + bytes > cap_bytes_ || gradient.dtype != waiting_.front().gradient.dtype ||
                            gradient.device != waiting_.front().gradient.device)) {
    send_waiting();
  }
  if (bytes >= cap_bytes_) {
    std::vector<Waiting> alone;
    alone.push_back({std::move(gradient), std::move(done)});
    send(std::move(alone));
    return;
  }
  waiting_.push_back({std::move(gradient), std::move(done)});
  waiting_bytes_ += bytes;
}

void ReduceScatterBucket::reduce(torch::Tensor flat, std::function<void(torch::Tensor)> done) {
  VOLT_INTERNAL_ASSERT(flat.dim() == 1, "a flat gradient");
  const int64_t n = communicator_.size();
  reduce(FlatGradient{flat.numel(), flat.scalar_type(), flat.device(),
                      [flat, n](torch::Tensor rows) mutable {
                        rows.copy_(flat.view({n, -1}));
                        flat = torch::Tensor();
                      }},
         std::move(done));
}

void ReduceScatterBucket::send_waiting() {
  if (waiting_.empty()) return;
  auto waiting = std::move(waiting_);
  waiting_.clear();
  waiting_bytes_ = 0;
  send(std::move(waiting));
}

void ReduceScatterBucket::send(std::vector<Waiting> waiting) {
  const int64_t n = communicator_.size();
  int64_t columns = 0;
  for (const auto& w : waiting) columns += w.gradient.numel / n;
  // Row r: every waiting gradient's chunk r, side by side.
  const auto& first = waiting.front().gradient;
  auto buffer = torch::empty({n, columns}, torch::TensorOptions().dtype(first.dtype).device(first.device));
  std::vector<Carried> carried;
  int64_t offset = 0;
  for (auto& w : waiting) {
    const int64_t m = w.gradient.numel / n;
    w.gradient.write(buffer.narrow(1, offset, m));
    offset += m;
    carried.push_back({m, std::move(w.done)});
  }
  launch(buffer.view({-1}), std::move(carried));
}

void ReduceScatterBucket::launch(torch::Tensor input, std::vector<Carried> carried) {
  if (replicas_ != nullptr && communicator_.size() == 1) {
    // A group of one has nothing to scatter: the replicas' all-reduce (in place) is the reduction.
    in_flight_.push_back({replicas_->all_reduce_async(input), std::move(carried)});
    return;
  }
  auto reduced = torch::empty({input.numel() / communicator_.size()}, input.options());
  const CollectiveSite site("fsdp gradients' reduce_scatter (backward)");  // Note [Diagnosing a hang]
  in_flight_.push_back({communicator_.reduce_scatter_into_async(reduced, input), std::move(carried)});
}

void ReduceScatterBucket::complete(bool wait_all) {
  const bool across_replicas = replicas_ != nullptr && communicator_.size() > 1;
  if (across_replicas && !wait_all) return;  // the replicas' all-reduces wait for flush()
  std::vector<InFlight> finished;
  while (!in_flight_.empty() && (wait_all || in_flight_.front().handle.is_completed())) {
    finished.push_back(std::move(in_flight_.front()));
    in_flight_.pop_front();
  }
  std::vector<torch::Tensor> reduced;
  for (auto& next : finished) reduced.push_back(next.handle.wait());
  if (across_replicas) {
    // All launched before any is waited for: they overlap one another.
    std::vector<CollectiveHandle> across;
    for (const auto& r : reduced) across.push_back(replicas_->all_reduce_async(r));
    for (size_t i = 0; i < across.size(); ++i) reduced[i] = across[i].wait();
  }
  for (size_t i = 0; i < finished.size(); ++i) {
    int64_t offset = 0;
    for (auto& c : finished[i].carried) {
      c.done(reduced[i].narrow(0, offset, c.m));
      offset += c.m;
    }
  }
}

void ReduceScatterBucket::flush() {
  send_waiting();
  complete(/*wait_all=*/true);
}

}  // namespace volt::fsdp

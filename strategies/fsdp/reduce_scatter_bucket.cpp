#include "strategies/fsdp/reduce_scatter_bucket.h"

#include "core/error.h"

namespace volt::fsdp {

ReduceScatterBucket::ReduceScatterBucket(Communicator& communicator, int64_t cap_bytes, Communicator* replicas)
    : communicator_(communicator), cap_bytes_(cap_bytes), replicas_(replicas) {
  VOLT_INTERNAL_ASSERT(replicas_ == nullptr || communicator_.size() == 1,
                       "replicas are all-reduced over only where the shard group is the rank alone (NO_SHARD)");
}

void ReduceScatterBucket::reduce(torch::Tensor flat, std::function<void(torch::Tensor)> done) {
  const int64_t n = communicator_.size();
  VOLT_INTERNAL_ASSERT(flat.dim() == 1 && flat.numel() % n == 0, "a flat gradient of size() chunks");
  complete(/*wait_all=*/false);
  const auto bytes = static_cast<int64_t>(flat.nbytes());
  if (!waiting_.empty() && (waiting_bytes_ + bytes > cap_bytes_ || flat.scalar_type() != waiting_.front().flat.scalar_type())) {
    send_waiting();
  }
  if (bytes >= cap_bytes_) {
    auto input = flat;
    std::vector<Waiting> alone;
    alone.push_back({std::move(flat), std::move(done)});
    launch(std::move(input), std::move(alone));
    return;
  }
  waiting_.push_back({std::move(flat), std::move(done)});
  waiting_bytes_ += bytes;
}

void ReduceScatterBucket::send_waiting() {
  if (waiting_.empty()) return;
  const int64_t n = communicator_.size();
  std::vector<torch::Tensor> columns;
  for (const auto& w : waiting_) columns.push_back(w.flat.view({n, -1}));
  auto input = waiting_.size() == 1 ? waiting_.front().flat : torch::cat(columns, 1).view({-1});  // row r: every chunk r
  auto carried = std::move(waiting_);
  waiting_.clear();
  waiting_bytes_ = 0;
  launch(std::move(input), std::move(carried));
}

void ReduceScatterBucket::launch(torch::Tensor input, std::vector<Waiting> carried) {
  if (replicas_ != nullptr) {
    // A group of one has nothing to scatter: the replicas' all-reduce (in place) is the reduction.
    in_flight_.push_back({replicas_->all_reduce_async(input), std::move(carried)});
    return;
  }
  auto reduced = torch::empty({input.numel() / communicator_.size()}, input.options());
  in_flight_.push_back({communicator_.reduce_scatter_into_async(reduced, input), std::move(carried)});
}

void ReduceScatterBucket::complete(bool wait_all) {
  const int64_t n = communicator_.size();
  while (!in_flight_.empty() && (wait_all || in_flight_.front().handle.is_completed())) {
    auto next = std::move(in_flight_.front());
    in_flight_.pop_front();
    const auto reduced = next.handle.wait();
    int64_t offset = 0;
    for (auto& w : next.carried) {
      const int64_t m = w.flat.numel() / n;
      w.done(reduced.narrow(0, offset, m));
      offset += m;
    }
  }
}

void ReduceScatterBucket::flush() {
  send_waiting();
  complete(/*wait_all=*/true);
}

}  // namespace volt::fsdp

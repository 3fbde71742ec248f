#include "strategies/fsdp/reduce_scatter_bucket.h"

#include "core/error.h"

namespace volt::fsdp {

ReduceScatterBucket::ReduceScatterBucket(Communicator& communicator, int64_t cap_bytes)
    : communicator_(communicator), cap_bytes_(cap_bytes) {}

void ReduceScatterBucket::reduce(torch::Tensor flat, std::function<void(torch::Tensor)> done) {
  const int64_t n = communicator_.size();
  VOLT_INTERNAL_ASSERT(flat.dim() == 1 && flat.numel() % n == 0, "a flat gradient of size() chunks");
  const auto bytes = static_cast<int64_t>(flat.nbytes());
  if (!waiting_.empty() && (waiting_bytes_ + bytes > cap_bytes_ || flat.scalar_type() != waiting_.front().flat.scalar_type())) {
    flush();
  }
  if (bytes >= cap_bytes_) {
    auto reduced = torch::empty({flat.numel() / n}, flat.options());
    communicator_.reduce_scatter_into(reduced, flat);
    done(reduced);
    return;
  }
  waiting_.push_back({std::move(flat), std::move(done)});
  waiting_bytes_ += bytes;
}

void ReduceScatterBucket::flush() {
  if (waiting_.empty()) return;
  const int64_t n = communicator_.size();
  std::vector<torch::Tensor> columns;
  for (const auto& w : waiting_) columns.push_back(w.flat.view({n, -1}));
  const auto bucket = torch::cat(columns, 1);  // row r: every waiting gradient's chunk r
  auto reduced = torch::empty({bucket.size(1)}, bucket.options());
  communicator_.reduce_scatter_into(reduced, bucket.view({-1}));
  int64_t offset = 0;
  auto waiting = std::move(waiting_);
  waiting_.clear();
  waiting_bytes_ = 0;
  for (auto& w : waiting) {
    const int64_t m = w.flat.numel() / n;
    w.done(reduced.narrow(0, offset, m));
    offset += m;
  }
}

}  // namespace volt::fsdp

#pragma once
// What volt's ring collectives (ring_reduce_scatter.h, ring_all_gather.h) share: how a flat tensor
// is cut into one chunk per rank, and how one step's point-to-point messages travel. Private to
// distributed/.
#include <algorithm>
#include <chrono>
#include <numeric>
#include <vector>

#include "distributed/c10d_compat.h"
#include "distributed/transports/c10d_entry.h"

namespace volt::ring {

// The point-to-point tag of the rings' messages. Gloo matches messages by peer and tag in the
// order they were posted, and a ring waits for each step, so one tag serves every call; c10d's
// own collectives use slots of their own and never meet it.
inline constexpr int kTag = 0x766f6c74;  // "volt"

// A flat tensor cut into consecutive chunks, chunk r of counts[r] elements (chunks may be empty).
// Indices wrap around: chunk(-1) is the last one, as a ring walks them.
class Chunks {
 public:
  explicit Chunks(std::vector<int64_t> counts) : counts_(std::move(counts)), offsets_(counts_.size() + 1, 0) {
    std::partial_sum(counts_.begin(), counts_.end(), offsets_.begin() + 1);
  }
  int64_t size() const { return static_cast<int64_t>(counts_.size()); }
  int64_t total() const { return offsets_.back(); }
  int64_t count(int64_t index) const { return counts_[wrap(index)]; }
  int64_t largest() const { return counts_.empty() ? 0 : *std::max_element(counts_.begin(), counts_.end()); }
  // Chunk `index` of `flat` (1-D, total() elements), a view.
  torch::Tensor of(const torch::Tensor& flat, int64_t index) const {
    const auto i = wrap(index);
    return flat.narrow(0, offsets_[i], counts_[i]);
  }

 private:
  size_t wrap(int64_t index) const {
    const int64_t n = size();
    return static_cast<size_t>(((index % n) + n) % n);
  }
  std::vector<int64_t> counts_;
  std::vector<int64_t> offsets_;
};

// One ring step: `send` goes to `right` while `receive` is filled from `left`, both posted before
// either is waited for (Gloo's unbound buffers, no size limit), each posted through `entry`
// (Note [Entering c10d from several threads]), then both waited for under `timeout`. An empty tensor is neither sent
// nor received: its peer skips it too, as every rank cuts the same chunks. Throws what c10d throws (a timeout, a lost
// peer).
inline void exchange(compat::C10dBackend& group, C10dEntry& entry, int right, const torch::Tensor& send, int left,
                     torch::Tensor receive, std::chrono::milliseconds timeout) {
  c10::intrusive_ptr<c10d::Work> receiving, sending;
  std::vector<at::Tensor> receive_into{receive}, send_from{send};
  if (receive.numel() > 0) receiving = entry.enter([&] { return group.recv(receive_into, left, kTag); });
  if (send.numel() > 0) sending = entry.enter([&] { return group.send(send_from, right, kTag); });
  if (sending) sending->wait(timeout);
  if (receiving) receiving->wait(timeout);
}

}  // namespace volt::ring

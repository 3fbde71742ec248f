#pragma once
// Which gradients of an iteration are ready and which buckets may be reduced. Buckets are handed
// to the comm hook strictly in bucket order (c10d matches collectives by the order in which
// ranks issue them), so a complete bucket waits for the buckets before it.
//
// Not thread-safe; owned by the Reducer.
#include <cstdint>
#include <vector>

namespace volt::buckets {

class ReadinessTracker {
 public:
  // `bucket_of[i]`: the bucket of parameter i; `bucket_sizes[b]`: its member count.
  void set_layout(std::vector<size_t> bucket_of, std::vector<size_t> bucket_sizes);
  // Starts an iteration: nothing ready, nothing launched.
  void reset();
  // Marks parameter `index` ready; false when it already was this iteration.
  bool mark_ready(size_t index);
  bool is_ready(size_t index) const { return ready_.at(index); }
  // The buckets that may be reduced now, in order; each is returned once per iteration.
  std::vector<size_t> take_launchable();
  // Parameters not ready yet, by index.
  std::vector<size_t> not_ready() const;
  // The parameters in the order they became ready this iteration.
  const std::vector<size_t>& ready_order() const { return ready_order_; }

 private:
  std::vector<size_t> bucket_of_;
  std::vector<size_t> bucket_sizes_;
  std::vector<size_t> pending_;  // per bucket: members not ready yet
  std::vector<bool> ready_;
  std::vector<size_t> ready_order_;
  size_t next_launch_ = 0;
};

}  // namespace volt::buckets

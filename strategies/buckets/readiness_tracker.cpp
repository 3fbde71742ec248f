#include "strategies/buckets/readiness_tracker.h"

#include "core/error.h"

namespace volt::buckets {

void ReadinessTracker::set_layout(std::vector<size_t> bucket_of, std::vector<size_t> bucket_sizes) {
  bucket_of_ = std::move(bucket_of);
  bucket_sizes_ = std::move(bucket_sizes);
  reset();
}

void ReadinessTracker::reset() {
  pending_ = bucket_sizes_;
  ready_.assign(bucket_of_.size(), false);
  ready_order_.clear();
  next_launch_ = 0;
}

bool ReadinessTracker::mark_ready(size_t index) {
  if (ready_.at(index)) return false;
  ready_[index] = true;
  ready_order_.push_back(index);
  auto& pending = pending_.at(bucket_of_[index]);
  VOLT_INTERNAL_ASSERT(pending > 0, "a bucket's pending count underflowed");
  --pending;
  return true;
}

std::vector<size_t> ReadinessTracker::take_launchable() {
  std::vector<size_t> launchable;
  while (next_launch_ < pending_.size() && pending_[next_launch_] == 0) launchable.push_back(next_launch_++);
  return launchable;
}

std::vector<size_t> ReadinessTracker::not_ready() const {
  std::vector<size_t> missing;
  for (size_t i = 0; i < ready_.size(); ++i) {
    if (!ready_[i]) missing.push_back(i);
  }
  return missing;
}

}  // namespace volt::buckets

#include "strategies/buckets/bucket_assignment.h"

#include <map>
#include <numeric>
#include <tuple>

#include "core/error.h"

namespace volt::buckets {

std::vector<size_t> reverse_registration_order(size_t n) {
  std::vector<size_t> order(n);
  std::iota(order.rbegin(), order.rend(), size_t{0});
  return order;
}

std::vector<std::vector<size_t>> assign_buckets(const std::vector<torch::Tensor>& parameters,
                                                const std::vector<size_t>& order, const BucketLimits& limits) {
  check<ConfigurationError>(limits.first_bucket_bytes > 0 && limits.bucket_bytes > 0,
                            "DDP buckets: expected positive bucket caps, got ", limits.first_bucket_bytes, " and ",
                            limits.bucket_bytes, " bytes; set bucket_cap_mb > 0");
  struct OpenBucket {
    std::vector<size_t> members;
    int64_t bytes = 0;
    bool first = true;  // this (dtype, device)'s first bucket: the small cap applies
  };
  // Key: (dtype, device type, device index).
  std::map<std::tuple<int, int, int>, OpenBucket> open;
  std::vector<std::vector<size_t>> closed;
  std::vector<bool> seen(parameters.size(), false);
  for (const size_t index : order) {
    check<ConfigurationError>(index < parameters.size(), "DDP buckets: parameter index ", index,
                              " out of range (", parameters.size(), " parameters)");
    check<ConfigurationError>(!seen[index], "DDP buckets: parameter ", index, " appears twice in the bucket order");
    seen[index] = true;
    const auto& p = parameters[index];
    check<ConfigurationError>(p.defined() && p.layout() == torch::kStrided, "DDP buckets: parameter ", index,
                              " is undefined or not dense; DDP reduces dense parameters only");
    const auto key = std::make_tuple(static_cast<int>(p.scalar_type()), static_cast<int>(p.device().type()),
                                     static_cast<int>(p.device().index()));
    auto& bucket = open[key];
    bucket.members.push_back(index);
    bucket.bytes += p.numel() * static_cast<int64_t>(p.element_size());
    const int64_t cap = bucket.first ? limits.first_bucket_bytes : limits.bucket_bytes;
    if (bucket.bytes >= cap) {
      closed.push_back(std::move(bucket.members));
      bucket = OpenBucket{};
      bucket.first = false;
    }
  }
  for (auto& [key, bucket] : open) {
    if (!bucket.members.empty()) closed.push_back(std::move(bucket.members));
  }
  // Number buckets by where their first member sits in `order` (Note [Bucket order]).
  std::vector<size_t> position(parameters.size(), 0);
  for (size_t i = 0; i < order.size(); ++i) position[order[i]] = i;
  std::sort(closed.begin(), closed.end(), [&](const auto& a, const auto& b) {
    return position[a.front()] < position[b.front()];
  });
  return closed;
}

std::vector<std::vector<size_t>> assign_consecutive_buckets(const std::vector<torch::Tensor>& parameters,
                                                            int64_t max_numel) {
  std::vector<std::vector<size_t>> buckets;
  std::vector<size_t> open;
  int64_t open_numel = 0;
  auto close = [&] {
    if (open.empty()) return;
    buckets.push_back(std::move(open));
    open.clear();
    open_numel = 0;
  };
  for (size_t k = parameters.size(); k-- > 0;) {
    const auto& p = parameters[k];
    const bool alone = max_numel == 0 || p.numel() >= max_numel;
    const bool fits = !open.empty() && open_numel + p.numel() <= max_numel &&
                      parameters[open.front()].scalar_type() == p.scalar_type() &&
                      parameters[open.front()].device() == p.device();
    if (alone || !fits) close();
    open.push_back(k);
    open_numel += p.numel();
    if (alone) close();
  }
  close();
  return buckets;
}

}  // namespace volt::buckets

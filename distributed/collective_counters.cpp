#include "distributed/collective_counters.h"

namespace volt {

std::string to_string(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::AllReduce: return "all_reduce";
    case CollectiveKind::Broadcast: return "broadcast";
    case CollectiveKind::AllGather: return "all_gather";
    case CollectiveKind::ReduceScatter: return "reduce_scatter";
    case CollectiveKind::Reduce: return "reduce";
    case CollectiveKind::Barrier: return "barrier";
    case CollectiveKind::Gather: return "gather";
    case CollectiveKind::Send: return "send";
    case CollectiveKind::Recv: return "recv";
  }
  return "?";
}

int64_t CollectiveCounters::total_calls() const {
  int64_t total = 0;
  for (const auto& c : by_kind) total += c.calls;
  return total;
}

int64_t CollectiveCounters::total_bytes() const {
  int64_t total = 0;
  for (const auto& c : by_kind) total += c.bytes;
  return total;
}

std::map<std::string, double> CollectiveCounters::as_metrics(const std::string& prefix) const {
  std::map<std::string, double> metrics;
  for (size_t i = 0; i < kCollectiveKinds; ++i) {
    if (by_kind[i].calls == 0) continue;
    const auto name = prefix + to_string(static_cast<CollectiveKind>(i));
    metrics[name + "_calls"] = static_cast<double>(by_kind[i].calls);
    metrics[name + "_bytes"] = static_cast<double>(by_kind[i].bytes);
    if (by_kind[i].sent_bytes > 0) metrics[name + "_sent_bytes"] = static_cast<double>(by_kind[i].sent_bytes);
  }
  metrics[prefix + "calls"] = static_cast<double>(total_calls());
  metrics[prefix + "bytes"] = static_cast<double>(total_bytes());
  return metrics;
}

CollectiveCounters CollectiveCounters::operator-(const CollectiveCounters& earlier) const {
  CollectiveCounters difference;
  for (size_t i = 0; i < kCollectiveKinds; ++i) {
    difference.by_kind[i].calls = by_kind[i].calls - earlier.by_kind[i].calls;
    difference.by_kind[i].bytes = by_kind[i].bytes - earlier.by_kind[i].bytes;
    difference.by_kind[i].sent_bytes = by_kind[i].sent_bytes - earlier.by_kind[i].sent_bytes;
  }
  return difference;
}

}  // namespace volt

#pragma once
// How much a Communicator has communicated, per kind of collective. Bytes per optimizer step is a
// first-class number in volt (gradient compression is judged on it), so every collective counts
// its calls and its payload.
#include <array>
#include <cstdint>
#include <map>
#include <string>

namespace volt {

// Send and Recv are point to point (Communicator::send_async), not collectives, counted beside them.
enum class CollectiveKind { AllReduce, Broadcast, AllGather, ReduceScatter, Reduce, Barrier, Gather, Send, Recv };
inline constexpr size_t kCollectiveKinds = 9;

// "all_reduce", "broadcast", ... (the names the metrics use).
std::string to_string(CollectiveKind kind);

struct CollectiveCount {
  int64_t calls = 0;
  // Payload in bytes: the bytes of the tensor this rank hands to the collective (for all_gather
  // and gather its own contribution, for reduce_scatter the whole input; a bfloat16 tensor
  // reduced through float32 counts 4 bytes an element, Note [bfloat16 over Gloo]). What actually crosses the wire
  // depends on the algorithm (a ring all_reduce sends ~2·(n-1)/n of it per rank); the payload is
  // the number that compares across algorithms and compression schemes.
  int64_t bytes = 0;
  // Bytes this rank put on the wire, for the collectives whose algorithm volt runs or fixes:
  // reduce_scatter (the ring, Note [Ring reduce_scatter]: (n-1)/n of the input) and all_gather
  // (a ring: n-1 times the input). 0 for the others, whose algorithm is the backend's choice.
  int64_t sent_bytes = 0;
};

struct CollectiveCounters {
  std::array<CollectiveCount, kCollectiveKinds> by_kind{};

  const CollectiveCount& operator[](CollectiveKind kind) const { return by_kind[static_cast<size_t>(kind)]; }
  CollectiveCount& operator[](CollectiveKind kind) { return by_kind[static_cast<size_t>(kind)]; }
  int64_t total_calls() const;
  int64_t total_bytes() const;
  // `<prefix><kind>_calls` and `<prefix><kind>_bytes` for every kind that was called, plus
  // `<prefix><kind>_sent_bytes` where it is counted, and `<prefix>calls` and `<prefix>bytes` in total; e.g.
  // {"comm/all_reduce_bytes": 4096, ...}.
  std::map<std::string, double> as_metrics(const std::string& prefix = "comm/") const;
  CollectiveCounters operator-(const CollectiveCounters& earlier) const;
};

}  // namespace volt

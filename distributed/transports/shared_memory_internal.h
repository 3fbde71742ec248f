#pragma once
// What shared_memory_group.cpp and shared_memory_buffers.cpp share: the kinds of segments and of
// calls, and the group's buffer segments and their registry. Private to distributed/.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "distributed/transports/shared_memory_group.h"
#include "distributed/transports/shared_segment.h"

namespace volt {

// What a segment holds, checked by the ranks that open it.
enum SharedSegmentKind : uint64_t { kGroupSegment = 1, kBuffersSegment = 2 };

// The collectives, as a call records its kind.
enum SharedCallKind : int32_t { kAllReduce, kReduce, kReduceScatter, kAllGather, kBroadcast, kBarrier };

inline size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// A segment of buffers (Note [all_reduce in place through shared memory]): after the stamp and
// this header, one region of `region_bytes` per rank, each starting on a page.
struct SharedMemoryGroup::Buffers {
  struct Header {
    uint64_t kind;
    int64_t size;
    uint64_t region_bytes;
    int64_t id;
  };
  static constexpr size_t kRegionsStart = 4096;

  Buffers(std::unique_ptr<SharedSegment> segment, size_t region_bytes, int64_t id, std::shared_ptr<Registry> registry)
      : segment(std::move(segment)), region_bytes(region_bytes), id(id), registry(std::move(registry)) {}
  ~Buffers();
  char* region(int64_t r) const { return segment->base() + kRegionsStart + static_cast<size_t>(r) * region_bytes; }

  std::unique_ptr<SharedSegment> segment;
  size_t region_bytes;
  int64_t id;
  std::shared_ptr<Registry> registry;
};

// The group's live buffer segments: a tensor's data is looked up here on every all_reduce
// (on the ring thread, while the caller's thread may free buffers), hence the lock.
struct SharedMemoryGroup::Registry {
  std::mutex mutex;
  std::vector<const Buffers*> live;
};

}  // namespace volt

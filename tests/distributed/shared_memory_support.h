#pragma once
// What the shared-memory tests share: a group joined over a communicator, each rank's values, and
// the segments in /dev/shm.
#include <gtest/gtest.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "distributed/communicator.h"
#include "distributed/transports/shared_memory_group.h"

namespace volt::testing {

inline constexpr size_t kSmallSlot = 4096;  // chunks of 4 KiB: a few thousand elements span many

inline SharedMemoryGroup::Exchange exchange_over(Communicator& c) {
  return [&c](const std::string& bytes) { return c.all_gather_bytes(bytes); };
}

inline std::unique_ptr<SharedMemoryGroup> join_group(Communicator& c, size_t slot_bytes = kSmallSlot,
                                                     std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  std::string why_not;
  auto group = SharedMemoryGroup::join(exchange_over(c), c.rank(), c.size(), timeout, "test group", slot_bytes, &why_not);
  EXPECT_NE(group, nullptr) << why_not;
  return group;
}

// The segments of this host's groups now in /dev/shm whose name holds `pid`.
inline int64_t segments_of(pid_t pid) {
  int64_t count = 0;
  const std::string prefix = "volt-shm-" + std::to_string(pid) + "-";
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    if (entry.path().filename().string().rfind(prefix, 0) == 0) ++count;
  }
  return count;
}

// Rank r's values: distinct per rank and element, exact in every dtype tested.
inline torch::Tensor values_of(int64_t rank, int64_t numel, c10::ScalarType dtype) {
  return (torch::arange(numel, torch::kDouble).remainder(97) * (rank + 1) - 40 * rank).to(dtype);
}

}  // namespace volt::testing

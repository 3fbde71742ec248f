#pragma once
// A shared-memory segment that every rank of a group maps (Note [Collectives through shared
// memory] says how it is named and why nothing is left behind): rank 0 creates it and reserves
// its pages, the name goes to the others through the group's other transport, they map it and
// check that it is this group's, and the name is removed once every rank has mapped it.
// Private to distributed/.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace volt {

// Every rank's bytes, by rank: an all_gather over the group's other transport. [collective]
using BytesExchange = std::function<std::vector<std::string>(const std::string&)>;

// A mapping of a whole segment; unmapped with the object.
class SharedSegment {
 public:
  SharedSegment(void* base, size_t bytes) : base_(base), bytes_(bytes) {}
  ~SharedSegment();
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;

  char* base() const { return static_cast<char*>(base_); }
  size_t bytes() const { return bytes_; }

 private:
  void* base_;
  size_t bytes_;
};

// A segment of `bytes` (at least kSegmentStampBytes, which it keeps for itself at its start)
// mapped on every rank. Rank 0 runs `initialize` on the rest of it before the others see it;
// the others accept it only where `belongs` says so. Null on every rank when any rank could not
// have it, `why_not` saying why (e.g. /dev/shm cannot hold it). [collective]
std::unique_ptr<SharedSegment> share_segment(const BytesExchange& exchange, int64_t rank, size_t bytes,
                                             const std::function<void(char*)>& initialize,
                                             const std::function<bool(const char*)>& belongs, std::string& why_not);

inline constexpr size_t kSegmentStampBytes = 64;

}  // namespace volt

#include "core/malloc_tuning.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace volt {
namespace {

// Blocks up to this size come from the heap and are reused (glibc's largest mmap threshold on
// 64-bit). A batch-128 activation of the example CNN is ~13 MB.
constexpr int kMmapThreshold = 32 << 20;
// Free memory at the top of the heap is returned to the kernel only beyond this.
constexpr int kTrimThreshold = 1 << 30;

bool user_set_malloc_tunables() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  return tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr;
}

}  // namespace

bool keep_freed_memory_in_heap() {
#if defined(__GLIBC__)
  static std::once_flag once;
  static bool applied = false;
  std::call_once(once, [] {
    if (user_set_malloc_tunables()) return;
    applied = mallopt(M_MMAP_THRESHOLD, kMmapThreshold) == 1 && mallopt(M_TRIM_THRESHOLD, kTrimThreshold) == 1;
  });
  return applied;
#else
  return false;
#endif
}

}  // namespace volt

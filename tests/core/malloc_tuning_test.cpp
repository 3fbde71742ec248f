// keep_freed_memory_in_heap: a freed block of a typical activation size is reused from the heap
// instead of being unmapped and faulted in again.
#include <gtest/gtest.h>

#include <malloc.h>

#include <cstdlib>
#include <cstring>

#include "core/malloc_tuning.h"

namespace volt {
namespace {

#if defined(__GLIBC__)
TEST(MallocTuning, ActivationSizedBlocksComeFromTheHeap) {
  // This test binary runs every case in its own process (CTest), so nothing else set the tunables.
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr) {
    GTEST_SKIP() << "GLIBC_TUNABLES sets malloc tunables, which keep_freed_memory_in_heap leaves alone";
  }
  constexpr size_t kBlock = 16 << 20;  // above glibc's default 128 KiB mmap threshold
  ASSERT_TRUE(keep_freed_memory_in_heap());
  EXPECT_TRUE(keep_freed_memory_in_heap()) << "applies once, then reports the same";
  const auto mapped_before = mallinfo2().hblkhd;
  void* block = std::malloc(kBlock);
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, kBlock);
  EXPECT_EQ(mallinfo2().hblkhd, mapped_before) << "a 16 MiB block was mmapped, not taken from the heap";
  std::free(block);
  const auto heap_after_free = mallinfo2().arena;
  EXPECT_GE(heap_after_free, kBlock) << "the freed block was trimmed back to the kernel";
}
#endif

}  // namespace
}  // namespace volt

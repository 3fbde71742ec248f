#pragma once

namespace volt {

// Makes glibc keep freed memory in the process heap instead of handing large blocks back to the
// kernel. A training step frees and re-allocates the same activation and gradient buffers every
// iteration; with glibc's defaults blocks above its (adaptive) mmap threshold are unmapped on free,
// so every step faults their pages in again and the kernel zeroes them. On the example CNN that was
// about half of the process's CPU time (docs/cpu_threads.md, "Memory allocator").
//
// Leaves everything alone when GLIBC_TUNABLES already sets a malloc tunable (the user's choice) or
// when the C library is not glibc. Applies once per process; returns whether it changed anything.
bool keep_freed_memory_in_heap();

}  // namespace volt

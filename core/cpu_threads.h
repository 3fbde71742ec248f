#pragma once
#include <cstdint>

namespace volt {

// Gives each of `processes_per_node` processes an equal share of the machine's cores for
// LibTorch's intra-op pool and for OpenBLAS, unless the user set OMP_NUM_THREADS (then both are
// left alone). Debian's LibTorch otherwise starts with one intra-op thread, and OpenBLAS with one
// thread per core in every process, so two ranks on two cores would run four busy threads.
// Returns the thread count in effect.
int64_t configure_cpu_threads(int64_t processes_per_node);

// Sets LibTorch's intra-op pool and OpenBLAS to `threads` threads (benchmarks that pin a count).
void set_cpu_threads(int64_t threads);

}  // namespace volt

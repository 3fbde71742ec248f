#pragma once
#include <cstdint>
#include <string>

namespace volt {

// Volt's CPU thread policy: one pool at a time. LibTorch already parallelizes *around* its BLAS
// calls (a convolution runs one GEMM per sample inside its intra-op pool), so an OpenBLAS pool
// started under it oversubscribes the cores, and the two pools' spin-waits take the cores from
// each other: on a 2-core machine, 2 intra-op + 2 BLAS threads made the 784-128-10 MLP 2.8×
// slower than one thread, and the example CNN slower than 2 intra-op threads over a
// single-threaded BLAS (bench/cpu_threads). So the core share goes to LibTorch's intra-op pool
// and OpenBLAS runs single-threaded inside it, unless told otherwise. The rule is deterministic:
// the same command on the same machine always computes with the same threads (a probe that timed
// the first steps could pick differently run to run, and the thread count can change how
// reductions are summed, so the weights with it).
struct CPUThreadRequest {
  int64_t processes_per_node = 1;
  int64_t threads = 0;       // intra-op threads (--threads); 0: OMP_NUM_THREADS, else cores / processes
  int64_t blas_threads = 0;  // OpenBLAS threads (--blas-threads); 0: OPENBLAS_NUM_THREADS, else 1
};

// What a process computes with, and where each number came from.
struct CPUThreads {
  int64_t intra_op = 1;
  int64_t blas = 1;          // 0 when the BLAS is not OpenBLAS (its threads are its own)
  std::string intra_op_source;  // "--threads", "OMP_NUM_THREADS" or "cores / processes"
  std::string blas_source;      // "--blas-threads", "OPENBLAS_NUM_THREADS" or "one pool at a time"
  // One line for the run's log, e.g. "CPU threads per process: 2 intra-op (cores / processes),
  // 1 OpenBLAS (one pool at a time)".
  std::string describe() const;
};

// Applies the policy above to this process (LibTorch's pool and OpenBLAS) and returns it.
CPUThreads configure_cpu_threads(const CPUThreadRequest& request);

// Sets LibTorch's intra-op pool to `intra_op` and OpenBLAS to `blas` threads (benchmarks that
// compare settings).
void set_cpu_threads(int64_t intra_op, int64_t blas);

// Makes LibTorch's operations called on this thread run on this thread alone (an OpenMP team of
// one), leaving the process's intra-op pool as it is for every other thread. For threads that work
// beside the training thread, such as a DataLoader's workers: each would otherwise start a team
// as large as the pool for every parallel operation, N workers × the pool's threads on the cores.
// With a LibTorch built without OpenMP it changes nothing.
void run_intra_op_inline_on_this_thread();

}  // namespace volt

#include "core/cpu_threads.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include <torch/torch.h>

namespace volt {
namespace {

// OpenBLAS is reached through Debian's libblas.so.3 alternative, so it is looked up at run time;
// with another BLAS the symbols are absent and only LibTorch's pool is set.
using SetBlasThreads = void (*)(int);
using GetBlasThreads = int (*)();

SetBlasThreads openblas_setter() {
  return reinterpret_cast<SetBlasThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
}

int64_t openblas_threads() {
  auto get = reinterpret_cast<GetBlasThreads>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  return get != nullptr ? get() : 0;
}

// OpenMP's per-thread team size. LibTorch links its own libgomp (Debian's, or the copy inside
// PyTorch's wheel), so it is looked up among the loaded libraries rather than linked: volt's own
// -fopenmp could bring a second OpenMP runtime whose settings LibTorch would not see.
using SetOmpThreads = void (*)(int);

SetOmpThreads omp_setter() {
  static const auto set = reinterpret_cast<SetOmpThreads>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  return set;
}

bool environment_has(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0';
}

}  // namespace

std::string CPUThreads::describe() const {
  std::string text = "CPU threads per process: " + std::to_string(intra_op) + " intra-op (" + intra_op_source + ")";
  if (blas > 0) text += ", " + std::to_string(blas) + " OpenBLAS (" + blas_source + ")";
  return text;
}

CPUThreads configure_cpu_threads(const CPUThreadRequest& request) {
  CPUThreads threads;
  if (request.threads > 0) {
    threads.intra_op = request.threads;
    threads.intra_op_source = "--threads";
  } else if (environment_has("OMP_NUM_THREADS")) {
    threads.intra_op = torch::get_num_threads();  // LibTorch read it at start
    threads.intra_op_source = "OMP_NUM_THREADS";
  } else {
    const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
    threads.intra_op = std::max<int64_t>(1, cores / std::max<int64_t>(1, request.processes_per_node));
    threads.intra_op_source = "cores / processes";
  }
  torch::set_num_threads(static_cast<int>(threads.intra_op));

  if (request.blas_threads > 0) {
    threads.blas = request.blas_threads;
    threads.blas_source = "--blas-threads";
  } else if (environment_has("OPENBLAS_NUM_THREADS")) {
    threads.blas = openblas_threads();  // OpenBLAS read it at start
    threads.blas_source = "OPENBLAS_NUM_THREADS";
    return threads;
  } else {
    threads.blas = 1;
    threads.blas_source = "one pool at a time";
  }
  if (auto set = openblas_setter()) {
    set(static_cast<int>(threads.blas));
  } else {
    threads.blas = 0;
  }
  return threads;
}

void run_intra_op_inline_on_this_thread() {
  // LibTorch sets a thread's team size from the process's pool the first time the thread runs a
  // parallel operation (lazy_init_num_threads); do that first, so that it does not undo this later.
  at::internal::lazy_init_num_threads();
  if (auto set = omp_setter()) set(1);
}

void set_cpu_threads(int64_t intra_op, int64_t blas) {
  torch::set_num_threads(static_cast<int>(intra_op));
  if (auto set = openblas_setter()) set(static_cast<int>(blas));
}

}  // namespace volt

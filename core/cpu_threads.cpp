#include "core/cpu_threads.h"

#include <dlfcn.h>

#include <cstdlib>
#include <thread>

#include <torch/torch.h>

namespace volt {
namespace {

// OpenBLAS is reached through Debian's libblas.so.3 alternative, so it is looked up at run time;
// with another BLAS the symbol is absent and only LibTorch's pool is set.
void set_blas_threads(int threads) {
  using SetThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(threads);
}

}  // namespace

int64_t configure_cpu_threads(int64_t processes_per_node) {
  if (std::getenv("OMP_NUM_THREADS") != nullptr) return torch::get_num_threads();
  const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  const int64_t share = std::max<int64_t>(1, cores / std::max<int64_t>(1, processes_per_node));
  set_cpu_threads(share);
  return share;
}

void set_cpu_threads(int64_t threads) {
  torch::set_num_threads(static_cast<int>(threads));
  set_blas_threads(static_cast<int>(threads));
}

}  // namespace volt

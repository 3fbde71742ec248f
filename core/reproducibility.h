#pragma once
#include <cstdint>

namespace volt {

// Seeds torch's CPU generator and, when present, every CUDA generator. volt's samplers draw from
// their own seeds (DataLoaderOptions::seed), so data order does not depend on this call.
void seed_everything(uint64_t seed);

// Restricts torch to deterministic algorithms (an op without one then throws) and, on CUDA,
// disables cuDNN autotuning, which picks kernels by timing.
void set_deterministic(bool enabled);

}  // namespace volt

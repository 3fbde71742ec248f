#include "core/device_memory.h"

#if defined(VOLT_WITH_CUDA)
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace volt {

namespace {

// The allocator's statistics are per device index; the current device when none is named.
#if defined(VOLT_WITH_CUDA)
c10::DeviceIndex index_of(const torch::Device& device) {
  return device.has_index() ? device.index() : c10::cuda::current_device();
}
#endif

}  // namespace

std::optional<int64_t> peak_allocated_bytes(const torch::Device& device) {
#if defined(VOLT_WITH_CUDA)
  if (device.is_cuda()) {
    // Entry 0 of each statistic is the aggregate over small and large pools (StatType::AGGREGATE,
    // whose namespace moved between LibTorch 1.13 and 2.x).
    return c10::cuda::CUDACachingAllocator::getDeviceStats(index_of(device)).allocated_bytes[0].peak;
  }
#endif
  (void)device;
  return std::nullopt;
}

std::optional<int64_t> allocated_bytes(const torch::Device& device) {
#if defined(VOLT_WITH_CUDA)
  if (device.is_cuda()) {
    return c10::cuda::CUDACachingAllocator::getDeviceStats(index_of(device)).allocated_bytes[0].current;
  }
#endif
  (void)device;
  return std::nullopt;
}

void reset_peak_allocated_bytes(const torch::Device& device) {
#if defined(VOLT_WITH_CUDA)
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(index_of(device));
#endif
  (void)device;
}

}  // namespace volt

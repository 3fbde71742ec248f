#include "core/device_peak_flops.h"

#include <vector>

#if defined(VOLT_WITH_CUDA)
#include <ATen/cuda/CUDAContext.h>
#endif

namespace volt {

std::optional<std::string> device_name(const torch::Device& device) {
#if defined(VOLT_WITH_CUDA)
  if (device.is_cuda()) {
    // LibTorch's cached properties: no direct CUDA runtime call, so volt needs no cudart of its own.
    if (const auto* properties = at::cuda::getDeviceProperties(device.has_index() ? device.index() : 0)) {
      return std::string(properties->name);
    }
  }
#endif
  (void)device;
  return std::nullopt;
}

std::optional<double> known_peak_flops(const std::string& name, torch::ScalarType dtype) {
  struct Peak {
    const char* contains;
    double half, single;  // 16-bit (bf16 and fp16 alike) and fp32, dense
  };
  // First match wins: the PCIe H100 before the SXM one (the H200 computes like the H100 SXM).
  static const std::vector<Peak> peaks{
      {"H100 PCIe", 756e12, 51.2e12},
      {"H200", 989.4e12, 66.9e12},
      {"H100", 989.4e12, 66.9e12},
      {"A100", 312e12, 19.5e12},
  };
  for (const auto& peak : peaks) {
    if (name.find(peak.contains) == std::string::npos) continue;
    if (dtype == torch::kBFloat16 || dtype == torch::kHalf) return peak.half;
    if (dtype == torch::kFloat) return peak.single;
    return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace volt

#include "trainer/device_choice.h"

#if defined(VOLT_WITH_CUDA)
#include <c10/cuda/CUDAFunctions.h>
#endif

#include "core/compat.h"
#include "core/error.h"

namespace volt {

torch::Device choose_device(const std::string& accelerator, const ProcessTopology& topology,
                            int64_t visible_cuda_devices) {
  check<ConfigurationError>(accelerator == "cpu" || accelerator == "cuda" || accelerator == "auto",
                            "--accelerator: expected cpu, cuda or auto, got '", accelerator, "'");
  const bool cuda = accelerator == "cuda" || (accelerator == "auto" && visible_cuda_devices > 0);
  if (!cuda) return torch::kCPU;
  const auto index = topology.local_rank;
  const std::string which = "this process (local rank " + std::to_string(index) + " of " +
                            std::to_string(topology.local_world_size) + " on its node) computes on cuda:" +
                            std::to_string(index);
  check<NotSupportedError>(visible_cuda_devices > 0, "--accelerator cuda: LibTorch sees no CUDA device",
                           compat::kBuiltWithCuda ? "" : " (this LibTorch is CPU-only)", "; ", which,
                           ". Use --accelerator cpu, or run where CUDA devices are visible");
  check<ConfigurationError>(topology.local_world_size <= visible_cuda_devices, "--accelerator ", accelerator,
                            ": ", topology.local_world_size, " processes per node need a CUDA device each (local rank "
                            "r computes on cuda:r), but this process sees ", visible_cuda_devices, "; ", which,
                            ". Start at most ", visible_cuda_devices, " processes per node (--devices ",
                            visible_cuda_devices, "), make more devices visible to every process "
                            "(CUDA_VISIBLE_DEVICES lists the node's GPUs for each local rank alike), or use "
                            "--accelerator cpu");
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

void make_current_device(const torch::Device& device) {
  if (!device.is_cuda()) return;
#if defined(VOLT_WITH_CUDA)
  c10::cuda::set_device(device.index());
#else
  throw InternalError("make_current_device(" + device.str() + ") in a build without CUDA: choose_device never "
                      "returns a CUDA device when LibTorch sees none");
#endif
}

}  // namespace volt

#include "run/device_choice.h"

#if defined(VOLT_WITH_CUDA)
#include <c10/cuda/CUDAFunctions.h>
#endif

#include "core/compat.h"
#include "core/error.h"

namespace volt {

std::vector<torch::Device> choose_devices(const std::string& accelerator, const ProcessTopology& topology,
                                          int64_t visible_cuda_devices, int64_t devices_per_process,
                                          bool share_devices) {
  check<ConfigurationError>(accelerator == "cpu" || accelerator == "cuda" || accelerator == "auto",
                            "--accelerator: expected cpu, cuda or auto, got '", accelerator, "'");
  VOLT_INTERNAL_ASSERT(devices_per_process >= 1, "a process drives at least one device, got ", devices_per_process);
  const bool cuda = accelerator == "cuda" || (accelerator == "auto" && visible_cuda_devices > 0);
  if (!cuda) return std::vector<torch::Device>(static_cast<size_t>(devices_per_process), torch::kCPU);
  const auto needed = topology.local_world_size * devices_per_process;
  const bool wraps = share_devices && needed > visible_cuda_devices && visible_cuda_devices > 0;
  const auto first = wraps ? (topology.local_rank * devices_per_process) % visible_cuda_devices
                           : topology.local_rank * devices_per_process;
  const std::string which =
      "this process (local rank " + std::to_string(topology.local_rank) + " of " +
      std::to_string(topology.local_world_size) + " on its node) computes on cuda:" + std::to_string(first) +
      (devices_per_process > 1 ? " to cuda:" + std::to_string(first + devices_per_process - 1) : std::string());
  check<NotSupportedError>(visible_cuda_devices > 0, "--accelerator cuda: LibTorch sees no CUDA device",
                           compat::kBuiltWithCuda ? "" : " (this LibTorch is CPU-only)", "; ", which,
                           ". Use --accelerator cpu, or run where CUDA devices are visible");
  const std::string need = devices_per_process == 1
                               ? std::to_string(topology.local_world_size) +
                                     " processes per node need a CUDA device each (local rank r "
                                     "computes on cuda:r)"
                               : std::to_string(topology.local_world_size) + " processes per node × " +
                                     std::to_string(devices_per_process) + " devices each need " +
                                     std::to_string(needed) + " CUDA devices (local rank r computes on cuda:r·" +
                                     std::to_string(devices_per_process) + " onwards)";
  check<ConfigurationError>(
      needed <= visible_cuda_devices ||
          (wraps && devices_per_process <= visible_cuda_devices && visible_cuda_devices % devices_per_process == 0),
      "--accelerator ", accelerator, ": ", need, ", but this process sees ", visible_cuda_devices, "; ", which,
      ". Start at most ", visible_cuda_devices / devices_per_process, " processes per node (--devices ",
      visible_cuda_devices / devices_per_process * devices_per_process,
      "), make more devices visible to every process (CUDA_VISIBLE_DEVICES lists the node's "
      "GPUs for each local rank alike), share them with --process-group-backend gloo, or use "
      "--accelerator cpu");
  std::vector<torch::Device> devices;
  for (int64_t i = 0; i < devices_per_process; ++i) {
    devices.emplace_back(torch::kCUDA, static_cast<c10::DeviceIndex>(first + i));
  }
  return devices;
}

torch::Device choose_device(const std::string& accelerator, const ProcessTopology& topology,
                            int64_t visible_cuda_devices) {
  return choose_devices(accelerator, topology, visible_cuda_devices, 1).front();
}

void make_current_device(const torch::Device& device) {
  if (!device.is_cuda()) return;
#if defined(VOLT_WITH_CUDA)
  c10::cuda::set_device(device.index());
#else
  throw InternalError("make_current_device(" + device.str() +
                      ") in a build without CUDA: choose_device never "
                      "returns a CUDA device when LibTorch sees none");
#endif
}

}  // namespace volt

#pragma once
// The dense peak arithmetic rate of the devices volt knows, for model FLOPs utilization (MFU):
// NVIDIA's datasheet figures without sparsity, by the dtype the matrix multiplications run in.
#include <torch/torch.h>

#include <optional>
#include <string>

namespace volt {

// The device's name as its driver reports it ("NVIDIA H200"); nullopt for a CPU or a build
// without CUDA.
std::optional<std::string> device_name(const torch::Device& device);

// FLOP/s of a device called `name` for matrix multiplications in `dtype` (kBFloat16, kHalf,
// kFloat), or nullopt when volt does not know the device (give the peak yourself then).
std::optional<double> known_peak_flops(const std::string& name, torch::ScalarType dtype);

}  // namespace volt

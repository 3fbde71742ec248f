#pragma once
// Device memory as LibTorch's CUDA caching allocator counts it: the bytes handed out to tensors
// (what torch.cuda.max_memory_allocated reports), not what the allocator reserved from the driver.
#include <torch/torch.h>

#include <cstdint>
#include <optional>

namespace volt {

// The most bytes allocated on `device` at once since the process started or the last
// reset_peak_allocated_bytes(device). nullopt for a non-CUDA device or a build without CUDA.
std::optional<int64_t> peak_allocated_bytes(const torch::Device& device);
// The bytes allocated on `device` now; nullopt where peak_allocated_bytes is.
std::optional<int64_t> allocated_bytes(const torch::Device& device);
// Starts a new peak at what is allocated now. A no-op where peak_allocated_bytes is nullopt.
void reset_peak_allocated_bytes(const torch::Device& device);

}  // namespace volt

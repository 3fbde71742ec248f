#pragma once
// Byte strings of different lengths through collectives that move equal sizes (Gloo's): each
// travels zero-padded to the longest, beside every rank's length. Private to distributed/.
#include <torch/torch.h>

#include <string>
#include <vector>

namespace volt {

// `bytes` as a uint8 tensor of `length` (>= bytes.size()) elements, zero-padded.
torch::Tensor padded_bytes(const std::string& bytes, int64_t length);

// Row r of `rows` (ranks × longest, uint8), cut to `lengths[r]` (int64, one per row).
std::vector<std::string> unpad_rows(const torch::Tensor& rows, const torch::Tensor& lengths);

}  // namespace volt

#pragma once
#include <torch/torch.h>

#include <string>

namespace fashion_mnist {

// Reads an IDX file (the MNIST family's format), gzip-compressed or not: a big-endian header
// (magic 0x0000080<d> for unsigned bytes with d dimensions, then d sizes) and the raw bytes.
// Returns a uint8 tensor of those sizes. Throws volt::DataError naming the file for a missing,
// truncated or malformed file.
torch::Tensor read_idx(const std::string& path);

}  // namespace fashion_mnist

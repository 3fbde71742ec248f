#pragma once
// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of volt's checkpoints and
// of TensorBoard's record framing. Neither Debian nor LibTorch ships a CRC32C for C++.
#include <cstddef>
#include <cstdint>

namespace volt {

// CRC-32C of `size` bytes, continuing from `crc` (0 to start; pass a previous result to extend it).
// Uses the CPU's crc32 instruction where it has one (x86-64 with SSE4.2), tables otherwise.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);

// The CRC-32C of A followed by B, from crc_a = crc32c(A), crc_b = crc32c(B) and B's size: a
// checksum of a whole built from checksums of its parts without reading it again (zlib's
// crc32_combine, for this polynomial). O(log size_b) 32x32 GF(2) matrix products.
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t size_b);

namespace detail {
// The table-driven version, on every CPU (tests compare it with the instruction).
uint32_t crc32c_software(const void* data, size_t size, uint32_t crc = 0);
}  // namespace detail

// TFRecord's masked form: a rotated, offset CRC, so that a CRC stored inside data that is itself
// checksummed does not produce degenerate values.
inline uint32_t masked_crc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

}  // namespace volt

#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace volt::image {

// How many channels an image is decoded to: RGB (3, what torchvision's ImageFolder loads, PIL's
// convert("RGB")) or Gray (1, luminance).
enum class ColorMode { RGB, Gray };

inline int64_t channels_of(ColorMode mode) { return mode == ColorMode::RGB ? 3 : 1; }

// Decoded pixels: height × width × channels bytes, row after row, channels interleaved (HWC).
struct Pixels {
  int64_t height = 0, width = 0, channels = 0;
  std::vector<uint8_t> data;

  const uint8_t* row(int64_t y) const { return data.data() + y * width * channels; }
};

// A rectangle of an image, in its pixels: rows [top, top + height), columns [left, left + width).
struct Region {
  int64_t top = 0, left = 0, height = 0, width = 0;
};

}  // namespace volt::image

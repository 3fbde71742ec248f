#pragma once
// Antialiased bilinear resampling, the filter of PIL's Image.resize(BILINEAR) and of ATen's
// _upsample_bilinear2d_aa (torchvision's Resize and RandomResizedCrop, antialias=True): a
// triangle filter as wide as the scale when shrinking, plain bilinear when growing, its weights
// normalized over the source pixels it may read.
#include <cstdint>
#include <vector>

#include "data/image/pixels.h"

namespace volt::image {

// One axis of a resampling. Output pixel i (0 <= i < size) is centred on source coordinate
// start + (i + 0.5) * scale, and its filter reads source pixels in [low, high) only (a crop's
// edges bound the filter as in torchvision, where the crop happens before the resize).
struct AxisMap {
  int64_t size = 0;
  double start = 0;
  double scale = 1;
  int64_t low = 0, high = 0;

  // Output pixel i is source pixel low + i.
  bool identity() const { return scale == 1.0 && start == static_cast<double>(low) && size == high - low; }
};

// The source pixels each output pixel reads and their weights.
struct AxisTaps {
  std::vector<int64_t> first;  // per output pixel, its first source pixel
  std::vector<int64_t> count;  // how many it reads
  int64_t width = 0;           // the largest count; weights has `width` slots per output pixel
  std::vector<float> weights;
  int64_t low = 0, high = 0;   // the source pixels any output pixel reads
};

AxisTaps taps_of(const AxisMap& axis);

// Resamples `source`, which holds the image's pixels from row `source_top` and column
// `source_left` on (and must cover the taps' [low, high) on both axes), into `out`: y.size() ×
// x.size() × channels floats (HWC), in the source's 0..255 scale, not rounded. 1 or 3 channels.
void resample(const Pixels& source, int64_t source_top, int64_t source_left, const AxisTaps& y, const AxisTaps& x,
              std::vector<float>& out);

}  // namespace volt::image

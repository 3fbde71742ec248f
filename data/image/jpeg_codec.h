#pragma once
// JPEG through libjpeg-turbo's libjpeg API (Note [Cropping before decoding] in data/image/image.h):
// the same library Pillow and torchvision decode with, and the API that decodes part of an image
// (jpeg_crop_scanline, jpeg_skip_scanlines), which TurboJPEG's API before 3.0 cannot.
#include <cstdint>
#include <string>

#include "data/image/pixels.h"

namespace volt::image {

struct JpegHeader {
  int64_t height = 0, width = 0, components = 0;
};

// The size the file's header declares. A DataError naming `name` when it is not a JPEG.
JpegHeader read_jpeg_header(const std::string& bytes, const std::string& name);

// The pixels of `region` (inside the image), decoded in `mode`: exactly the pixels a full decode
// would give there (libjpeg's default, accurate integer IDCT and fancy upsampling; tested), with
// only the rows that cover the region and its iMCU columns plus one on each side decompressed.
// Corrupt or truncated data in
// the decoded part is a DataError naming `name` (libjpeg's warnings count as errors: a truncated
// file is not filled in with gray).
Pixels decode_jpeg(const std::string& bytes, const Region& region, ColorMode mode, const std::string& name);

// `pixels` (1 or 3 channels) as a baseline JPEG of `quality` (1..100), 4:2:0 chroma for RGB.
std::string encode_jpeg(const Pixels& pixels, int quality = 90);

}  // namespace volt::image

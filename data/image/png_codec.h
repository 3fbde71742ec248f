#pragma once
// PNG through libpng's simplified API (png_image): whole images only (PNG has no random access to
// its rows), decoded to 8 bits per channel.
#include <cstdint>
#include <string>

#include "data/image/pixels.h"

namespace volt::image {

struct PngHeader {
  int64_t height = 0, width = 0;
};

// The size the file's header declares. A DataError naming `name` when it is not a PNG.
PngHeader read_png_header(const std::string& bytes, const std::string& name);

// The whole image in `mode`. An alpha channel is dropped, not composited (what PIL's
// convert("RGB") does); 16-bit samples are reduced to 8 bits. Corrupt or truncated data is a
// DataError naming `name`.
Pixels decode_png(const std::string& bytes, ColorMode mode, const std::string& name);

}  // namespace volt::image

#include "data/image/png_codec.h"

#include <png.h>

#include <cstring>
#include <vector>

#include "core/error.h"

namespace volt::image {
namespace {

// A png_image whose resources are released however the caller leaves.
struct ImageReader {
  png_image image;
  ImageReader(const std::string& bytes, const std::string& name) {
    std::memset(&image, 0, sizeof image);
    image.version = PNG_IMAGE_VERSION;
    const int begun = png_image_begin_read_from_memory(&image, bytes.data(), bytes.size());
    check<DataError>(begun != 0, "PNG: ", name, " cannot be read: ", image.message);
  }
  ~ImageReader() { png_image_free(&image); }
};

}  // namespace

PngHeader read_png_header(const std::string& bytes, const std::string& name) {
  ImageReader reader(bytes, name);
  return {reader.image.height, reader.image.width};
}

Pixels decode_png(const std::string& bytes, ColorMode mode, const std::string& name) {
  ImageReader reader(bytes, name);
  png_image& image = reader.image;
  const bool alpha = (image.format & PNG_FORMAT_FLAG_ALPHA) != 0;
  const int64_t channels = channels_of(mode);
  // With an alpha channel, decode it too and drop it here: libpng would composite it onto a
  // background, which changes the colour channels where PIL keeps them.
  if (mode == ColorMode::RGB) {
    image.format = alpha ? PNG_FORMAT_RGBA : PNG_FORMAT_RGB;
  } else {
    image.format = alpha ? PNG_FORMAT_GA : PNG_FORMAT_GRAY;
  }
  const int64_t decoded_channels = channels + (alpha ? 1 : 0);
  std::vector<uint8_t> decoded(PNG_IMAGE_SIZE(image));
  const int finished = png_image_finish_read(&image, nullptr, decoded.data(), 0, nullptr);
  check<DataError>(finished != 0, "PNG: ", name, " is corrupt or truncated: ", image.message);
  Pixels pixels;
  pixels.height = image.height;
  pixels.width = image.width;
  pixels.channels = channels;
  if (!alpha) {
    pixels.data = std::move(decoded);
    return pixels;
  }
  const size_t count = static_cast<size_t>(pixels.height * pixels.width);
  pixels.data.resize(count * static_cast<size_t>(channels));
  for (size_t i = 0; i < count; ++i) {
    std::memcpy(&pixels.data[i * static_cast<size_t>(channels)], &decoded[i * static_cast<size_t>(decoded_channels)],
                static_cast<size_t>(channels));
  }
  return pixels;
}

}  // namespace volt::image

#include "data/image/image.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "data/image/jpeg_codec.h"
#include "data/image/png_codec.h"

namespace volt::image {
namespace {

bool starts_with(const std::string& bytes, std::initializer_list<uint8_t> magic) {
  if (bytes.size() < magic.size()) return false;
  size_t i = 0;
  for (uint8_t b : magic) {
    if (static_cast<uint8_t>(bytes[i++]) != b) return false;
  }
  return true;
}

AxisMap whole(int64_t size) { return {size, 0.0, 1.0, 0, size}; }

// Keeps output pixels [offset, offset + length) of `axis`.
void crop_axis(AxisMap& axis, int64_t offset, int64_t length) {
  if (axis.identity()) {
    axis.low += offset;
    axis.high = axis.low + length;
    axis.start = static_cast<double>(axis.low);
  } else {
    axis.start += static_cast<double>(offset) * axis.scale;
  }
  axis.size = length;
}

}  // namespace

Image Image::from_file_bytes(std::shared_ptr<const std::string> bytes, std::string name, ColorMode mode) {
  Image image;
  image.name_ = std::move(name);
  image.mode_ = mode;
  image.channels_ = channels_of(mode);
  int64_t height = 0, width = 0;
  if (starts_with(*bytes, {0xFF, 0xD8, 0xFF})) {
    const JpegHeader header = read_jpeg_header(*bytes, image.name_);
    height = header.height;
    width = header.width;
    image.jpeg_ = true;
  } else if (starts_with(*bytes, {0x89, 'P', 'N', 'G'})) {
    const PngHeader header = read_png_header(*bytes, image.name_);
    height = header.height;
    width = header.width;
  } else {
    throw DataError("Image: " + image.name_ + " is neither a JPEG nor a PNG file (its first bytes say neither)");
  }
  check<DataError>(height > 0 && width > 0, "Image: ", image.name_, " declares a ", width, "x", height, " image");
  image.encoded_ = std::move(bytes);
  image.y_ = whole(height);
  image.x_ = whole(width);
  return image;
}

Image Image::from_pixels(Pixels pixels) {
  check<ConfigurationError>(pixels.channels == 1 || pixels.channels == 3, "Image: expected 1 or 3 channels, got ",
                            pixels.channels);
  Image image;
  image.name_ = "(pixels)";
  image.mode_ = pixels.channels == 3 ? ColorMode::RGB : ColorMode::Gray;
  image.channels_ = pixels.channels;
  image.y_ = whole(pixels.height);
  image.x_ = whole(pixels.width);
  image.decoded_ = std::make_shared<const Pixels>(std::move(pixels));
  return image;
}

void Image::crop(const Region& region) {
  check<DataError>(region.top >= 0 && region.left >= 0 && region.height > 0 && region.width > 0 &&
                       region.top + region.height <= height() && region.left + region.width <= width(),
                   "Image: a crop of ", region.width, "x", region.height, " at (", region.left, ", ", region.top,
                   ") does not fit the ", width(), "x", height(), " image ", name_);
  crop_axis(y_, region.top, region.height);
  // Columns of a mirrored image are the mirrored columns of the unmirrored one.
  crop_axis(x_, flipped_ ? width() - region.left - region.width : region.left, region.width);
}

void Image::resize(int64_t height, int64_t width) {
  check<ConfigurationError>(height > 0 && width > 0, "Image: expected a positive size to resize to, got ", width, "x",
                            height);
  if (!y_.identity() || !x_.identity()) {
    // A second resize reads the first one's pixels, mirrored if flipped (Note [Cropping before
    // decoding]).
    Image first = from_pixels(pixels());
    first.name_ = name_;
    *this = std::move(first);
  }
  y_.scale = static_cast<double>(y_.size) / static_cast<double>(height);
  y_.size = height;
  x_.scale = static_cast<double>(x_.size) / static_cast<double>(width);
  x_.size = width;
}

void Image::flip_horizontal() { flipped_ = !flipped_; }

void Image::transform_values(const std::vector<float>& scale, const std::vector<float>& shift) {
  check<ConfigurationError>(static_cast<int64_t>(scale.size()) == channels_ && scale.size() == shift.size(),
                            "Image: expected ", channels_, " per-channel values for the ", channels_,
                            "-channel image ", name_, ", got ", scale.size());
  if (value_scale_.empty()) {
    value_scale_.assign(scale.begin(), scale.end());
    value_shift_.assign(shift.begin(), shift.end());
    return;
  }
  for (size_t c = 0; c < scale.size(); ++c) {
    value_scale_[c] *= scale[c];
    value_shift_[c] = value_shift_[c] * scale[c] + shift[c];
  }
}

Image::Source Image::source_for(const AxisTaps& y, const AxisTaps& x) const {
  if (decoded_) return {decoded_, 0, 0};
  if (jpeg_) {
    const Region region{y.low, x.low, y.high - y.low, x.high - x.low};
    return {std::make_shared<const Pixels>(decode_jpeg(*encoded_, region, mode_, name_)), y.low, x.low};
  }
  return {std::make_shared<const Pixels>(decode_png(*encoded_, mode_, name_)), 0, 0};
}

void Image::resampled(const AxisTaps& y, const AxisTaps& x, std::vector<float>& out) const {
  const Source source = source_for(y, x);
  resample(*source.pixels, source.top, source.left, y, x, out);
}

Pixels Image::pixels() const {
  check<StateError>(value_scale_.empty(), "Image: ", name_, " has a value transform (Normalize) pending, which bytes "
                    "cannot hold; put Normalize after every geometric transform");
  const AxisTaps y = taps_of(y_), x = taps_of(x_);
  std::vector<float> values;
  resampled(y, x, values);
  Pixels out;
  out.height = y_.size;
  out.width = x_.size;
  out.channels = channels_;
  out.data.resize(values.size());
  const int64_t row = out.width * channels_;
  for (int64_t i = 0; i < out.height; ++i) {
    for (int64_t j = 0; j < out.width; ++j) {
      const int64_t from = i * row + (flipped_ ? out.width - 1 - j : j) * channels_;
      for (int64_t c = 0; c < channels_; ++c) {
        const float v = std::nearbyint(values[static_cast<size_t>(from + c)]);
        out.data[static_cast<size_t>(i * row + j * channels_ + c)] = static_cast<uint8_t>(std::clamp(v, 0.0f, 255.0f));
      }
    }
  }
  return out;
}

void Image::write_chw(float* out) const {
  const AxisTaps y = taps_of(y_), x = taps_of(x_);
  thread_local std::vector<float> values;  // the thread's own, reused (see resample)
  resampled(y, x, values);
  const int64_t h = y_.size, w = x_.size, plane = h * w;
  for (int64_t c = 0; c < channels_; ++c) {
    const float scale = (value_scale_.empty() ? 1.0f : value_scale_[static_cast<size_t>(c)]) / 255.0f;
    const float shift = value_shift_.empty() ? 0.0f : value_shift_[static_cast<size_t>(c)];
    float* dst = out + c * plane;
    for (int64_t i = 0; i < h; ++i) {
      const float* src = &values[static_cast<size_t>(i * w * channels_ + c)];
      float* row = dst + i * w;
      if (flipped_) {
        for (int64_t j = 0; j < w; ++j) row[w - 1 - j] = src[j * channels_] * scale + shift;
      } else {
        for (int64_t j = 0; j < w; ++j) row[j] = src[j * channels_] * scale + shift;
      }
    }
  }
}

}  // namespace volt::image

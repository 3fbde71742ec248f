#pragma once
// Note [Cropping before decoding]: torchvision's recipe decodes a whole JPEG, crops a random
// part of it, resizes the crop, flips it, converts it to floats and normalizes them, one full
// pass over the pixels per step. volt's Image is a view that records the steps instead: a crop
// narrows the source rectangle, a resize sets the scale of the output grid over it, a flip
// mirrors the output, Normalize sets a per-channel affine of the values. Only the conversion to
// a tensor computes pixels, once: it decodes just the rows and iMCU columns the resampling filter
// reads (libjpeg's jpeg_skip_scanlines and jpeg_crop_scanline, which give exactly the pixels a
// full decode gives there), resamples along x then y, and writes normalized floats straight into
// their place in the batch, mirrored if flipped. The result is what the steps would give one
// after the other: resampling output pixel i reads the source around start + (i + 0.5) × scale
// whatever came before, a crop after a resize picks output pixels of that resize, a crop before
// it bounds the filter as a crop of the decoded image would, and the filter and a mirror commute
// (it is symmetric). A resize of an image already resized computes the first resize's pixels
// (rounded to bytes, as PIL would hold them) before the second.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/image/pixels.h"
#include "data/image/resample.h"

namespace volt::image {

// An image on its way through transforms (Note [Cropping before decoding]). Not thread-safe; one
// per sample.
class Image {
 public:
  // The file's bytes (JPEG or PNG, told by their first bytes), read no further than the header
  // here. `name` (the path) is what errors name.
  static Image from_file_bytes(std::shared_ptr<const std::string> bytes, std::string name, ColorMode mode);
  static Image from_pixels(Pixels pixels);

  // The size of the image as the transforms so far have made it.
  int64_t height() const { return y_.size; }
  int64_t width() const { return x_.size; }
  int64_t channels() const { return channels_; }
  const std::string& name() const { return name_; }

  // Keeps `region` of the current image, which must lie inside it.
  void crop(const Region& region);
  // To height × width, antialiased bilinear (torchvision's default for PIL images and tensors).
  void resize(int64_t height, int64_t width);
  void flip_horizontal();
  // Values become value × scale[c] + shift[c] in the tensor (after the conversion's / 255):
  // Normalize's (v - mean) / std is scale = 1 / std, shift = -mean / std.
  void transform_values(const std::vector<float>& scale, const std::vector<float>& shift);

  // The current image's bytes (rounded, clamped to 0..255); no value transform may be pending.
  Pixels pixels() const;
  // The current image as channels × height × width floats at `out`: value / 255, then the value
  // transforms. What the pipeline's conversion to a tensor writes into a batch.
  void write_chw(float* out) const;

 private:
  Image() = default;
  // The source pixels covering rows [y.low, y.high) × columns [x.low, x.high), and where they start.
  struct Source {
    std::shared_ptr<const Pixels> pixels;
    int64_t top = 0, left = 0;
  };
  Source source_for(const AxisTaps& y, const AxisTaps& x) const;
  void resampled(const AxisTaps& y, const AxisTaps& x, std::vector<float>& out) const;

  std::shared_ptr<const std::string> encoded_;  // the file, until something needs it decoded
  bool jpeg_ = false;
  std::string name_;
  ColorMode mode_ = ColorMode::RGB;
  std::shared_ptr<const Pixels> decoded_;  // the whole source, once decoded (or given)
  int64_t channels_ = 0;
  AxisMap y_, x_;
  bool flipped_ = false;
  std::vector<float> value_scale_, value_shift_;  // per channel, applied to value / 255
};

}  // namespace volt::image

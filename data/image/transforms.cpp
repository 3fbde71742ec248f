#include "data/image/transforms.h"

#include <cmath>

#include "core/error.h"

namespace volt::image {
namespace {

// Python's round(): halves to even, which torchvision's crop arithmetic goes through.
int64_t python_round(double value) { return static_cast<int64_t>(std::nearbyint(value)); }

}  // namespace

Resize::Resize(int64_t shorter_side) : shorter_side_(shorter_side) {
  check<ConfigurationError>(shorter_side >= 1, "Resize: expected a size >= 1, got ", shorter_side);
}

Resize::Resize(int64_t height, int64_t width) : height_(height), width_(width) {
  check<ConfigurationError>(height >= 1 && width >= 1, "Resize: expected a size >= 1, got ", height, "x", width);
}

void Resize::apply(Image& image, SampleRandom&) const {
  if (shorter_side_ == 0) return image.resize(height_, width_);
  const int64_t h = image.height(), w = image.width();
  // torchvision: the longer side is int(size * long / short).
  if (w <= h) {
    image.resize(
        static_cast<int64_t>(static_cast<double>(shorter_side_) * static_cast<double>(h) / static_cast<double>(w)),
        shorter_side_);
  } else {
    image.resize(shorter_side_, static_cast<int64_t>(static_cast<double>(shorter_side_) * static_cast<double>(w) /
                                                     static_cast<double>(h)));
  }
}

FixedSize Resize::size_after(const FixedSize&) const {
  if (shorter_side_ != 0) return std::nullopt;
  return std::array<int64_t, 2>{height_, width_};
}

CenterCrop::CenterCrop(int64_t height, int64_t width) : height_(height), width_(width) {
  check<ConfigurationError>(height >= 1 && width >= 1, "CenterCrop: expected a size >= 1, got ", height, "x", width);
}

void CenterCrop::apply(Image& image, SampleRandom&) const {
  check<DataError>(image.height() >= height_ && image.width() >= width_, "CenterCrop: ", image.name(), " is ",
                   image.width(), "x", image.height(), " at this step, smaller than the ", width_, "x", height_,
                   " crop; put a Resize before it");
  image.crop({python_round(static_cast<double>(image.height() - height_) / 2.0),
              python_round(static_cast<double>(image.width() - width_) / 2.0), height_, width_});
}

RandomResizedCrop::RandomResizedCrop(int64_t height, int64_t width, std::pair<double, double> scale,
                                     std::pair<double, double> ratio)
    : height_(height), width_(width), scale_(scale), ratio_(ratio) {
  check<ConfigurationError>(height >= 1 && width >= 1, "RandomResizedCrop: expected a size >= 1, got ", height, "x",
                            width);
  check<ConfigurationError>(scale.first > 0 && scale.first <= scale.second && scale.second <= 1.0,
                            "RandomResizedCrop: expected 0 < scale.first <= scale.second <= 1, got (", scale.first,
                            ", ", scale.second, ")");
  check<ConfigurationError>(ratio.first > 0 && ratio.first <= ratio.second,
                            "RandomResizedCrop: expected 0 < ratio.first <= ratio.second, got (", ratio.first, ", ",
                            ratio.second, ")");
}

Region RandomResizedCrop::crop_for(int64_t image_height, int64_t image_width, SampleRandom& random) const {
  const double area = static_cast<double>(image_height) * static_cast<double>(image_width);
  const double log_low = std::log(ratio_.first), log_high = std::log(ratio_.second);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * random.uniform(scale_.first, scale_.second);
    const double aspect = std::exp(random.uniform(log_low, log_high));
    const int64_t w = python_round(std::sqrt(target_area * aspect));
    const int64_t h = python_round(std::sqrt(target_area / aspect));
    if (0 < w && w <= image_width && 0 < h && h <= image_height) {
      const int64_t top = random.integer(0, image_height - h + 1);
      const int64_t left = random.integer(0, image_width - w + 1);
      return {top, left, h, w};
    }
  }
  // The central crop, at the nearest ratio allowed.
  const double in_ratio = static_cast<double>(image_width) / static_cast<double>(image_height);
  int64_t w = image_width, h = image_height;
  if (in_ratio < ratio_.first) {
    h = python_round(static_cast<double>(w) / ratio_.first);
  } else if (in_ratio > ratio_.second) {
    w = python_round(static_cast<double>(h) * ratio_.second);
  }
  return {(image_height - h) / 2, (image_width - w) / 2, h, w};
}

void RandomResizedCrop::apply(Image& image, SampleRandom& random) const {
  image.crop(crop_for(image.height(), image.width(), random));
  image.resize(height_, width_);
}

RandomHorizontalFlip::RandomHorizontalFlip(double p) : p_(p) {
  check<ConfigurationError>(p >= 0 && p <= 1, "RandomHorizontalFlip: expected a probability in [0, 1], got ", p);
}

void RandomHorizontalFlip::apply(Image& image, SampleRandom& random) const {
  if (random.bernoulli(p_)) image.flip_horizontal();
}

Normalize::Normalize(std::vector<float> mean, std::vector<float> std) {
  check<ConfigurationError>(!mean.empty() && mean.size() == std.size(), "Normalize: expected one mean and one std per "
                            "channel, got ", mean.size(), " means and ", std.size(), " stds");
  for (size_t c = 0; c < mean.size(); ++c) {
    check<ConfigurationError>(std[c] > 0, "Normalize: expected positive stds, got ", std[c], " for channel ", c);
    scale_.push_back(1.0f / std[c]);
    shift_.push_back(-mean[c] / std[c]);
  }
}

void Normalize::apply(Image& image, SampleRandom&) const { image.transform_values(scale_, shift_); }

TransformStep::TransformStep(std::shared_ptr<const ImageTransform> transform) : transform_(std::move(transform)) {
  check<ConfigurationError>(transform_ != nullptr, "ImagePipeline: expected a transform, got nullptr");
}

void ImagePipeline::run(Image& image, SampleRandom& random) const {
  for (const auto& step : steps_) step->apply(image, random);
}

torch::Tensor ImagePipeline::operator()(Image image, SampleRandom& random) const {
  run(image, random);
  torch::Tensor out = torch::empty({image.channels(), image.height(), image.width()}, torch::kFloat);
  image.write_chw(out.data_ptr<float>());
  return out;
}

void ImagePipeline::write(Image image, SampleRandom& random, float* out, const std::array<int64_t, 3>& expected) const {
  run(image, random);
  check<DataError>(image.channels() == expected[0] && image.height() == expected[1] && image.width() == expected[2],
                   "ImagePipeline: ", image.name(), " comes out ", image.channels(), "x", image.height(), "x",
                   image.width(), " (channels x height x width), the batch's others ", expected[0], "x", expected[1],
                   "x", expected[2]);
  image.write_chw(out);
}

FixedSize ImagePipeline::fixed_size() const {
  FixedSize size;
  for (const auto& step : steps_) size = step->size_after(size);
  return size;
}

}  // namespace volt::image

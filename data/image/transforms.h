#pragma once
// Image transforms, composable like torchvision's: an ImagePipeline is a list of steps ending in
// the conversion to a float tensor (ToTensor: C × H × W in [0, 1]), which Normalize adjusts. Each
// step records what it does on the Image view (Note [Cropping before decoding]); randomness comes
// from the sample's own stream (Note [Per-sample randomness]), never from a shared generator.
#include <torch/torch.h>

#include <array>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "data/image/image.h"
#include "data/sample_random.h"

namespace volt::image {

// The size an image has after a step, when it does not depend on the input's: {height, width}.
using FixedSize = std::optional<std::array<int64_t, 2>>;

// One step of an ImagePipeline. apply() runs on the loader's workers, several at once: it must
// not change the transform.
class ImageTransform {
 public:
  virtual ~ImageTransform() = default;
  virtual void apply(Image& image, SampleRandom& random) const = 0;
  // The size after this step given the size before it (nullopt: unknown).
  virtual FixedSize size_after(const FixedSize& before) const { return before; }
};

// torchvision's Resize: an int resizes the shorter side to `size` keeping the aspect ratio (the
// longer side truncated, as torchvision computes it); a pair gives height and width.
class Resize : public ImageTransform {
 public:
  explicit Resize(int64_t shorter_side);
  Resize(int64_t height, int64_t width);
  void apply(Image& image, SampleRandom& random) const override;
  FixedSize size_after(const FixedSize& before) const override;

 private:
  int64_t shorter_side_ = 0, height_ = 0, width_ = 0;
};

// torchvision's CenterCrop: the central height × width (the top-left corner rounded as
// torchvision rounds it). An image smaller than the crop is a DataError naming it (torchvision
// pads it with zeros; resize first).
class CenterCrop : public ImageTransform {
 public:
  explicit CenterCrop(int64_t size) : CenterCrop(size, size) {}
  CenterCrop(int64_t height, int64_t width);
  void apply(Image& image, SampleRandom& random) const override;
  FixedSize size_after(const FixedSize&) const override { return std::array<int64_t, 2>{height_, width_}; }

 private:
  int64_t height_, width_;
};

// torchvision's RandomResizedCrop: a crop of a random area fraction in `scale` and aspect ratio
// in `ratio` (log-uniform), at a random place, resized to height × width (antialiased bilinear);
// after 10 draws that do not fit, the central crop at the nearest allowed ratio. The same
// algorithm and bounds as torchvision; the draws come from the sample's stream.
class RandomResizedCrop : public ImageTransform {
 public:
  explicit RandomResizedCrop(int64_t size, std::pair<double, double> scale = {0.08, 1.0},
                             std::pair<double, double> ratio = {3.0 / 4.0, 4.0 / 3.0})
      : RandomResizedCrop(size, size, scale, ratio) {}
  RandomResizedCrop(int64_t height, int64_t width, std::pair<double, double> scale, std::pair<double, double> ratio);
  void apply(Image& image, SampleRandom& random) const override;
  FixedSize size_after(const FixedSize&) const override { return std::array<int64_t, 2>{height_, width_}; }
  // The crop torchvision's get_params would choose with these draws, for an image of that size.
  Region crop_for(int64_t image_height, int64_t image_width, SampleRandom& random) const;

 private:
  int64_t height_, width_;
  std::pair<double, double> scale_, ratio_;
};

// Mirrors left and right with probability p.
class RandomHorizontalFlip : public ImageTransform {
 public:
  explicit RandomHorizontalFlip(double p = 0.5);
  void apply(Image& image, SampleRandom& random) const override;

 private:
  double p_;
};

// torchvision's Normalize on the tensor: (value - mean[c]) / std[c], value in [0, 1]. One mean
// and std per channel of the image.
class Normalize : public ImageTransform {
 public:
  Normalize(std::vector<float> mean, std::vector<float> std);
  void apply(Image& image, SampleRandom& random) const override;

 private:
  std::vector<float> scale_, shift_;
};

// A step of a pipeline: any ImageTransform, held by value, so that a pipeline is written as
// ImagePipeline{{RandomResizedCrop(224), RandomHorizontalFlip(), Normalize(mean, std)}}.
class TransformStep {
 public:
  template <typename T, typename = std::enable_if_t<std::is_base_of_v<ImageTransform, std::decay_t<T>>>>
  TransformStep(T transform) : transform_(std::make_shared<std::decay_t<T>>(std::move(transform))) {}
  TransformStep(std::shared_ptr<const ImageTransform> transform);
  const ImageTransform& operator*() const { return *transform_; }
  const ImageTransform* operator->() const { return transform_.get(); }

 private:
  std::shared_ptr<const ImageTransform> transform_;
};

// The steps of an image sample, then its conversion to a C × H × W float tensor (torchvision's
// Compose([..., ToTensor(), Normalize(...)]), with ToTensor implied at the end). Thread-safe:
// apply() changes nothing in the pipeline.
class ImagePipeline {
 public:
  ImagePipeline() = default;
  ImagePipeline(std::vector<TransformStep> steps) : steps_(std::move(steps)) {}

  // The steps applied to `image`, its pixels computed once (Note [Cropping before decoding]).
  torch::Tensor operator()(Image image, SampleRandom& random) const;
  // The same, written into `out` (channels × height × width floats; `expected` says their size,
  // and a DataError names the image when it comes out another size).
  void write(Image image, SampleRandom& random, float* out, const std::array<int64_t, 3>& expected) const;
  // The output's height and width when the steps fix them (a crop or a two-sided Resize).
  FixedSize fixed_size() const;
  const std::vector<TransformStep>& steps() const { return steps_; }

 private:
  void run(Image& image, SampleRandom& random) const;
  std::vector<TransformStep> steps_;
};

}  // namespace volt::image

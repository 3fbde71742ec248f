#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/image/transforms.h"

namespace volt {

struct ImageFolderOptions {
  // What each image goes through; with no step that fixes the size, every image must already
  // have the same size to be batched.
  image::ImagePipeline transform;
  image::ColorMode mode = image::ColorMode::RGB;  // torchvision's ImageFolder loads RGB
  // Files taken, by extension, case-insensitive; others are ignored (as torchvision does).
  std::vector<std::string> extensions = {".jpg", ".jpeg", ".png"};
  // A file that cannot be decoded is left out of its batch (the batch is one sample shorter),
  // counted and warned about once, instead of failing the run. Off by default: a corrupt file is
  // a DataError naming it and its sample index. Only the dataset's own batching skips (no
  // DataLoaderOptions::collate, which reads samples one by one through get()).
  bool skip_unreadable = false;
};

// torchvision's ImageFolder: root/<class>/**/<file>, classes sorted by name and numbered from 0,
// files sorted by path within each class (subfolders followed, symbolic links too), decoded with
// libjpeg-turbo (JPEG) and libpng (PNG) and put through the transform pipeline. A sample is
// (C × H × W float image, int64 class index). A batch of fixed-size images is written straight
// into one N × C × H × W tensor (pinned when the loader pins), with no per-sample tensor and no
// stack. Files are read when a sample is, on the loader's workers. Thread-safe.
class ImageFolderDataset : public SampleDataset {
 public:
  // A missing root, a root without class folders and a class folder without images are
  // DataErrors that name them.
  ImageFolderDataset(std::string root, ImageFolderOptions options = {});

  int64_t size() const override { return static_cast<int64_t>(files_.size()); }
  Sample get(int64_t index, SampleRandom& random) const override;
  Batch get_batch(const BatchRequest& request) const override;

  const std::vector<std::string>& classes() const { return classes_; }
  // Sample i's file and class index.
  const std::string& path(int64_t index) const { return files_.at(static_cast<size_t>(index)); }
  int64_t class_of(int64_t index) const { return labels_.at(static_cast<size_t>(index)); }
  // Samples left out so far (skip_unreadable).
  int64_t skipped() const { return skipped_.load(); }

 private:
  image::Image open(int64_t index) const;
  std::string root_;
  ImageFolderOptions options_;
  std::vector<std::string> classes_;
  std::vector<std::string> files_;
  std::vector<int64_t> labels_;
  mutable std::atomic<int64_t> skipped_{0};
  mutable std::mutex warned_mutex_;
  mutable std::set<int64_t> warned_;  // samples skipped and warned about, once each
};

}  // namespace volt

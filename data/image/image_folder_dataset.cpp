#include "data/image/image_folder_dataset.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>

#include "core/error.h"
#include "core/warning.h"
#include "data/error_context.h"

namespace volt {
namespace {

namespace fs = std::filesystem;

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

// The whole file, read with one read() into a string of its size.
std::shared_ptr<const std::string> read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  check<DataError>(fd >= 0, "ImageFolderDataset: cannot open ", path, ": ", std::strerror(errno));
  struct stat info {};
  auto bytes = std::make_shared<std::string>();
  if (::fstat(fd, &info) == 0) bytes->resize(static_cast<size_t>(info.st_size));
  size_t done = 0;
  while (done < bytes->size()) {
    const ssize_t n = ::read(fd, bytes->data() + done, bytes->size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  const int error = errno;
  ::close(fd);
  check<DataError>(done == bytes->size(), "ImageFolderDataset: cannot read ", path, " (", done, " of ", bytes->size(),
                   " bytes): ", std::strerror(error));
  return bytes;
}

}  // namespace

ImageFolderDataset::ImageFolderDataset(std::string root, ImageFolderOptions options)
    : root_(std::move(root)), options_(std::move(options)) {
  std::error_code error;
  check<DataError>(fs::is_directory(root_, error), "ImageFolderDataset: ", root_,
                   " is not a directory; expected root/<class name>/<image files>");
  for (const auto& entry : fs::directory_iterator(root_)) {
    if (entry.is_directory()) classes_.push_back(entry.path().filename().string());
  }
  std::sort(classes_.begin(), classes_.end());
  check<DataError>(!classes_.empty(), "ImageFolderDataset: ", root_,
                   " has no class folders; expected root/<class name>/<image files>");
  std::set<std::string> extensions;
  for (const auto& e : options_.extensions) extensions.insert(lower(e));
  for (size_t label = 0; label < classes_.size(); ++label) {
    std::vector<std::string> found;
    const fs::path folder = fs::path(root_) / classes_[label];
    for (const auto& entry :
         fs::recursive_directory_iterator(folder, fs::directory_options::follow_directory_symlink)) {
      if (entry.is_regular_file() && extensions.count(lower(entry.path().extension().string()))) {
        found.push_back(entry.path().string());
      }
    }
    std::string allowed;
    for (const auto& e : options_.extensions) allowed += (allowed.empty() ? "" : ", ") + e;
    check<DataError>(!found.empty(), "ImageFolderDataset: the class folder ", folder.string(),
                     " has no image files (", allowed, "); remove it or add its images");
    std::sort(found.begin(), found.end());
    for (auto& file : found) {
      files_.push_back(std::move(file));
      labels_.push_back(static_cast<int64_t>(label));
    }
  }
}

image::Image ImageFolderDataset::open(int64_t index) const {
  const std::string& file = files_.at(static_cast<size_t>(index));
  return image::Image::from_file_bytes(read_file(file), file, options_.mode);
}

Sample ImageFolderDataset::get(int64_t index, SampleRandom& random) const {
  check<ConfigurationError>(index >= 0 && index < size(), "ImageFolderDataset: sample ", index, " is outside [0, ",
                            size(), ")");
  return {options_.transform(open(index), random), torch::tensor(labels_[static_cast<size_t>(index)], torch::kLong)};
}

Batch ImageFolderDataset::get_batch(const BatchRequest& request) const {
  const image::FixedSize fixed = options_.transform.fixed_size();
  if (!fixed && !options_.skip_unreadable) return SampleDataset::get_batch(request);
  // Each image goes straight to its row of the batch. With skip_unreadable, the rows of the
  // images that could be read are kept, in order.
  const auto n = static_cast<int64_t>(request.indices.size());
  std::vector<Sample> per_sample;  // without a fixed size: the samples read, for default_collate
  torch::Tensor images;
  torch::Tensor labels =
      torch::empty({n}, torch::TensorOptions().dtype(torch::kLong).pinned_memory(request.pin_memory));
  int64_t* label = labels.data_ptr<int64_t>();
  std::array<int64_t, 3> shape{};
  if (fixed) {
    shape = {image::channels_of(options_.mode), (*fixed)[0], (*fixed)[1]};
    images = torch::empty({n, shape[0], shape[1], shape[2]},
                          torch::TensorOptions().dtype(torch::kFloat).pinned_memory(request.pin_memory));
  }
  int64_t kept = 0;
  for (int64_t position = 0; position < n; ++position) {
    if (request.abandoned && request.abandoned()) return {};
    const int64_t index = request.indices[static_cast<size_t>(position)];
    try {
      check<ConfigurationError>(index >= 0 && index < size(), "index outside the dataset's [0, ", size(), ")");
      SampleRandom random = request.random(static_cast<size_t>(position));
      if (fixed) {
        options_.transform.write(open(index), random, images[kept].data_ptr<float>(), shape);
      } else {
        per_sample.push_back(get(index, random));
      }
      label[kept] = labels_[static_cast<size_t>(index)];
      ++kept;
    } catch (const DataError& e) {
      if (!options_.skip_unreadable) {
        rethrow_with_context("sample " + std::to_string(index) + " (position " + std::to_string(position) +
                             " of its batch, epoch " + std::to_string(request.epoch) + "): ");
      }
      ++skipped_;
      std::lock_guard<std::mutex> lock(warned_mutex_);
      if (warned_.insert(index).second) {
        warn("ImageFolderDataset: skipping sample " + std::to_string(index) + " (skip_unreadable; " +
             std::to_string(skipped_.load()) + " skipped so far): " + e.what());
      }
    } catch (...) {
      rethrow_with_context("sample " + std::to_string(index) + " (position " + std::to_string(position) +
                           " of its batch, epoch " + std::to_string(request.epoch) + "): ");
    }
  }
  check<DataError>(kept > 0, "ImageFolderDataset: no sample of a batch could be read (skip_unreadable skipped all ", n,
                   "); check the files under ", root_);
  if (!fixed) {
    Batch batch =
        request.pin_memory ? default_collate_pinned(std::move(per_sample)) : default_collate(std::move(per_sample));
    return batch;
  }
  Batch batch;
  batch.input = kept == n ? images : images.narrow(0, 0, kept);
  batch.target = kept == n ? labels : labels.narrow(0, 0, kept);
  return batch;
}

}  // namespace volt

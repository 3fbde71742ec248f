#include "fashion_mnist/fashion_mnist_data.h"

#include <filesystem>

#include "fashion_mnist/idx_reader.h"

namespace fashion_mnist {
namespace {

// The training set's statistics (pixel values in [0, 1]).
constexpr double kMean = 0.2860;
constexpr double kStd = 0.3530;

}  // namespace

FashionMnistData::FashionMnistData(FashionMnistOptions options) : options_(std::move(options)) {
  volt::check<volt::ConfigurationError>(options_.val_size >= 0 && options_.val_size < 60000,
                                        "FashionMnistData: expected 0 <= val_size < 60000, got ", options_.val_size);
}

std::shared_ptr<volt::TensorDataset> FashionMnistData::load_split(const std::string& data_dir,
                                                                  const std::string& split) {
  namespace fs = std::filesystem;
  const auto images = read_idx((fs::path(data_dir) / (split + "-images-idx3-ubyte.gz")).string());
  const auto labels = read_idx((fs::path(data_dir) / (split + "-labels-idx1-ubyte.gz")).string());
  volt::check<volt::DataError>(images.dim() == 3 && images.size(1) == 28 && images.size(2) == 28,
                               "Fashion-MNIST: expected 28×28 images in ", data_dir, ", got shape ", images.sizes());
  volt::check<volt::DataError>(labels.dim() == 1 && labels.size(0) == images.size(0), "Fashion-MNIST: ",
                               labels.numel(), " labels for ", images.size(0), " images in ", data_dir);
  auto x = (images.to(torch::kFloat32).div_(255.0).sub_(kMean).div_(kStd)).unsqueeze(1).contiguous();
  return std::make_shared<volt::TensorDataset>(x, labels.to(torch::kLong));
}

void FashionMnistData::setup(volt::TrainerFn fn) {
  if ((fn == volt::TrainerFn::Fitting || fn == volt::TrainerFn::Validating) && !train_) {
    auto full = load_split(options_.data_dir, "train");
    auto parts = volt::random_split(full, {full->size() - options_.val_size, options_.val_size}, options_.seed);
    train_ = parts[0];
    val_ = parts[1];
  }
  if ((fn == volt::TrainerFn::Testing || fn == volt::TrainerFn::Predicting) && !test_) {
    test_ = load_split(options_.data_dir, "t10k");
  }
}

std::shared_ptr<volt::DataLoader> FashionMnistData::train_dataloader() {
  return std::make_shared<volt::DataLoader>(train_, loader_options(options_.batch_size, /*shuffle=*/true));
}

std::shared_ptr<volt::DataLoader> FashionMnistData::val_dataloader() {
  if (!val_ || val_->size() == 0) return nullptr;
  return std::make_shared<volt::DataLoader>(val_, loader_options(512, /*shuffle=*/false));
}

std::shared_ptr<volt::DataLoader> FashionMnistData::test_dataloader() {
  return std::make_shared<volt::DataLoader>(test_, loader_options(512, /*shuffle=*/false));
}

volt::DataLoaderOptions FashionMnistData::loader_options(int64_t batch_size, bool shuffle) const {
  volt::DataLoaderOptions options{.batch_size = batch_size, .shuffle = shuffle, .num_workers = options_.num_workers,
                                  .pin_memory = options_.pin_memory};
  if (shuffle) options.seed = options_.seed;
  return options;
}

}  // namespace fashion_mnist

#pragma once
#include <memory>
#include <string>

#include "trainer/volt.h"

namespace fashion_mnist {

struct FashionMnistOptions {
  std::string data_dir = "/usr/share/datasets/fashion-mnist";  // the four *-ubyte.gz files
  int64_t batch_size = 128;
  int64_t val_size = 5000;  // held out of the 60,000 training images for validation
  uint64_t seed = 42;       // of the train/val split and of shuffling (the example passes --seed)
  int64_t num_workers = 0;  // the loaders' worker threads (the same batches with any number)
  bool pin_memory = false;  // batches in page-locked memory, uploaded during the step on a GPU
};

// Fashion-MNIST as a DataModule: 55,000 training, 5,000 validation and 10,000 test images,
// normalized with the training set's mean and standard deviation, as 1×28×28 float tensors.
class FashionMnistData : public volt::DataModule {
 public:
  explicit FashionMnistData(FashionMnistOptions options = {});
  void setup(volt::TrainerFn fn) override;
  std::shared_ptr<volt::DataLoader> train_dataloader() override;
  std::shared_ptr<volt::DataLoader> val_dataloader() override;
  std::shared_ptr<volt::DataLoader> test_dataloader() override;
  std::shared_ptr<volt::DataLoader> predict_dataloader() override { return test_dataloader(); }

  // Images (N×1×28×28 float, normalized) and labels (N, int64) of one split: "train" or "t10k".
  static std::shared_ptr<volt::TensorDataset> load_split(const std::string& data_dir, const std::string& split);

 private:
  volt::DataLoaderOptions loader_options(int64_t batch_size, bool shuffle) const;
  FashionMnistOptions options_;
  std::shared_ptr<const volt::Dataset> train_, val_, test_;
};

}  // namespace fashion_mnist

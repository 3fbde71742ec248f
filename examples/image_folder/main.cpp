// A small CNN trained on an ImageFolder of JPEG files (examples/image_folder/make_image_folder.cpp
// writes Fashion-MNIST as one), decoded and augmented every epoch on the loader's worker threads:
//   build/examples/make_image_folder --out /tmp/fashion_mnist_jpeg
//   build/examples/image_folder --data-dir /tmp/fashion_mnist_jpeg --num-workers 2 --max-epochs 2
// Accepts every Trainer flag (see --help). Prints the test metrics, and how much of the training
// time went to waiting for batches.
#include <boost/program_options.hpp>

#include <chrono>
#include <iomanip>
#include <iostream>

#include "data/image/image_folder_dataset.h"
#include "fashion_mnist/classifier.h"
#include "trainer/volt.h"

namespace po = boost::program_options;

namespace {

using Clock = std::chrono::steady_clock;

struct ImageFolderDataOptions {
  std::string data_dir;  // with train/ and test/
  int64_t batch_size = 128;
  int64_t num_workers = 2;
  bool pin_memory = false;
};

// Fashion-MNIST's statistics (pixel values in [0, 1]).
constexpr float kMean = 0.2860f, kStd = 0.3530f;

class ImageFolderData : public volt::DataModule {
 public:
  explicit ImageFolderData(ImageFolderDataOptions options) : options_(std::move(options)) {}
  void setup(volt::TrainerFn) override {
    if (train_) return;
    volt::ImageFolderOptions train;
    train.mode = volt::image::ColorMode::Gray;
    // A mild augmentation for 28x28 clothes: most of the image, a little stretched, either way round.
    train.transform = volt::image::ImagePipeline{{volt::image::RandomResizedCrop(28, {0.8, 1.0}, {0.9, 1.1}),
                                                  volt::image::RandomHorizontalFlip(),
                                                  volt::image::Normalize({kMean}, {kStd})}};
    train_ = std::make_shared<volt::ImageFolderDataset>(options_.data_dir + "/train", train);
    volt::ImageFolderOptions test;
    test.mode = volt::image::ColorMode::Gray;
    test.transform = volt::image::ImagePipeline{{volt::image::CenterCrop(28), volt::image::Normalize({kMean}, {kStd})}};
    test_ = std::make_shared<volt::ImageFolderDataset>(options_.data_dir + "/test", test);
  }
  std::shared_ptr<volt::DataLoader> train_dataloader() override { return loader(train_, true); }
  std::shared_ptr<volt::DataLoader> val_dataloader() override { return loader(test_, false); }
  std::shared_ptr<volt::DataLoader> test_dataloader() override { return loader(test_, false); }

 private:
  std::shared_ptr<volt::DataLoader> loader(std::shared_ptr<const volt::Dataset> dataset, bool shuffle) const {
    return std::make_shared<volt::DataLoader>(dataset,
                                              volt::DataLoaderOptions{.batch_size = options_.batch_size,
                                                                      .shuffle = shuffle,
                                                                      .num_workers = options_.num_workers,
                                                                      .persistent_workers = options_.num_workers > 0,
                                                                      .pin_memory = options_.pin_memory});
  }
  ImageFolderDataOptions options_;
  std::shared_ptr<const volt::Dataset> train_, test_;
};

// The time between one training step's end and the next one's start (the wait for the batch,
// and whatever else happens between steps) against the time of the steps themselves.
class DataWait : public volt::Callback {
 public:
  void on_train_batch_start(volt::Trainer&, volt::Module&, const volt::Batch&, int64_t batch_idx) override {
    const auto now = Clock::now();
    if (batch_idx > 0 && ended_) between_ += now - *ended_;
    started_ = now;
  }
  void on_train_batch_end(volt::Trainer&, volt::Module&, const torch::Tensor&, const volt::Batch&, int64_t) override {
    ended_ = Clock::now();
    in_steps_ += *ended_ - started_;
  }
  void on_train_epoch_start(volt::Trainer&, volt::Module&) override { ended_.reset(); }
  double fraction() const {
    const double steps = std::chrono::duration<double>(in_steps_).count();
    const double between = std::chrono::duration<double>(between_).count();
    return steps > 0 ? between / steps : 0;
  }

 private:
  Clock::time_point started_;
  std::optional<Clock::time_point> ended_;
  Clock::duration in_steps_{}, between_{};
};

}  // namespace

int main(int argc, char** argv) {
  return volt::run_main([&](volt::ProcessLauncher& launcher) {
    ImageFolderDataOptions data_options;
    fashion_mnist::ClassifierOptions model_options;
    po::options_description program("ImageFolder example options");
    program.add_options()("data-dir", po::value(&data_options.data_dir)->required(),
                          "an ImageFolder with train/ and test/ "
                          "(build/examples/make_image_folder writes one)")(
        "batch-size", po::value(&data_options.batch_size)->default_value(data_options.batch_size),
        "batch size (per process)")("num-workers",
                                    po::value(&data_options.num_workers)->default_value(data_options.num_workers),
                                    "threads that decode and augment the images ahead of the step")(
        "pin-memory", po::value(&data_options.pin_memory)->default_value(data_options.pin_memory),
        "build batches in page-locked memory and upload the next during the step (CUDA)")(
        "lr", po::value(&model_options.lr)->default_value(model_options.lr), "AdamW learning rate");
    po::variables_map values;
    auto options = volt::TrainerOptions::from_args(argc, argv, program, &values);
    if (!options.max_epochs && options.max_steps == -1) options.max_epochs = 2;
    if (!options.seed) options.seed = 42;

    volt::Trainer trainer(options, launcher);
    auto wait = std::make_shared<DataWait>();
    trainer.add_callback(wait);
    auto data = std::make_shared<ImageFolderData>(data_options);
    auto model = std::make_shared<fashion_mnist::Classifier>(model_options);
    const auto started = Clock::now();
    trainer.fit(model, data);
    const double fit_seconds = std::chrono::duration<double>(Clock::now() - started).count();
    const auto metrics = trainer.test(model, data);
    if (trainer.is_global_zero()) {
      std::cout << "Final test metrics:";
      for (const auto& [name, value] : metrics)
        std::cout << " " << name << "=" << std::fixed << std::setprecision(4) << value;
      std::cout << "\nFit time: " << std::setprecision(1) << fit_seconds << " s; between training steps (waiting for "
                << "data): " << std::setprecision(1) << 100.0 * wait->fraction() << "% of the steps' time" << std::endl;
    }
  });
}

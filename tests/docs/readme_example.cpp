#include "trainer/volt.h"

struct Classifier : volt::Module {
  torch::nn::Linear fc{784, 10};
  Classifier() { register_module("fc", fc); }
  torch::Tensor training_step(const volt::Batch& batch, int64_t batch_idx) override {
    auto loss = torch::nn::functional::cross_entropy(fc(batch.input.flatten(1)), batch.target);
    log("train_loss", loss, {.prog_bar = true});          // on_step by default in training_step
    return loss;                                          // an undefined tensor skips the step
  }
  void validation_step(const volt::Batch& batch, int64_t) override {
    log("val_acc", (fc(batch.input.flatten(1)).argmax(1) == batch.target).to(torch::kFloat).mean());
  }                                                       // on_epoch, batch-size weighted
  volt::OptimizerConfig configure_optimizers() override {
    auto adam = std::make_shared<torch::optim::Adam>(parameters(), 1e-3);
    return {adam, {std::make_shared<volt::StepLR>(*adam, 100), volt::SchedulerInterval::Step}};
  }
};

struct MyDataModule : volt::DataModule {                   // 28x28 images in 10 classes
  std::shared_ptr<volt::DataLoader> train_dataloader() override { return loader(2048, /*shuffle=*/true); }
  std::shared_ptr<volt::DataLoader> val_dataloader() override { return loader(512, /*shuffle=*/false); }
  std::shared_ptr<volt::DataLoader> loader(int64_t n, bool shuffle) {  // yours: images from disk (docs/data.md)
    auto data = std::make_shared<volt::TensorDataset>(torch::rand({n, 1, 28, 28}), torch::randint(10, {n}));
    return std::make_shared<volt::DataLoader>(data, volt::DataLoaderOptions{.batch_size = 64, .shuffle = shuffle});
  }
};

int main(int argc, char** argv) {
  return volt::run_main([&](volt::ProcessLauncher& launcher) {  // errors → message + exit code
    volt::Trainer trainer(volt::TrainerOptions::from_args(argc, argv), launcher);  // --devices N
    trainer.fit(std::make_shared<Classifier>(), std::make_shared<MyDataModule>());
  });
}

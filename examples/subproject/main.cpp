// Fits y = 3x − 1 from a pair of tensors, handed to fit without a DataModule, and fails (exit 1)
// unless the fit recovers the line: the build of a volt subproject is only useful if it trains.
#include <cmath>
#include <iostream>

#include "trainer/volt.h"

struct Line : volt::Module {
  torch::nn::Linear linear{nullptr};
  Line() { linear = register_module("linear", torch::nn::Linear(1, 1)); }
  torch::Tensor training_step(const volt::Batch& batch, int64_t) override {
    return torch::mse_loss(linear->forward(batch.input), batch.target);
  }
  volt::OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1));
  }
};

int main(int argc, char** argv) {
  return volt::run_main([&] {
    auto options = volt::TrainerOptions::from_args(argc, argv);
    if (!options.max_epochs) options.max_epochs = 50;
    torch::manual_seed(0);
    auto x = torch::rand({256, 1});
    auto data = std::make_shared<volt::TensorDataset>(x, 3 * x - 1);
    auto model = std::make_shared<Line>();
    volt::Trainer trainer(options);
    trainer.fit(model, std::make_shared<volt::DataLoader>(data, volt::DataLoaderOptions{.batch_size = 32}));
    const double slope = model->linear->weight.item<double>(), intercept = model->linear->bias.item<double>();
    std::cout << "subproject: y = " << slope << " x + " << intercept << std::endl;
    if (std::abs(slope - 3) > 0.05 || std::abs(intercept + 1) > 0.05) {
      throw volt::Error("subproject: expected y = 3x - 1 within 0.05, got y = " + std::to_string(slope) + "x + " +
                        std::to_string(intercept));
    }
  });
}

// docs/fabric.md's first example, compiled and run as written: the lines between the two marker
// comments are that example's, character for character (FabricShape.TheDocsExampleRunsAsWritten
// compares them with the document and runs this program). Around them: the names the example
// takes as given (Net, my_loader, criterion: 64 regression samples, batch 4 per rank) and a line
// per rank with what the test checks, "DOCS_LOOP rank=.. step=.. params=..". With --devices 2 in
// the example and no torchrun, the Fabric's own launcher starts rank 1 running this main again.
#include <iomanip>
#include <iostream>
#include <sstream>

#include "tests/support/regression_problem.h"
#include "trainer/volt.h"

namespace {

struct Net : torch::nn::Module {
  Net() { linear = register_module("linear", torch::nn::Linear(8, 1)); }
  torch::Tensor forward(const torch::Tensor& x) { return linear->forward(x); }
  torch::nn::Linear linear{nullptr};
};

torch::Tensor criterion(const torch::Tensor& prediction, const torch::Tensor& target) {
  return (prediction - target).square().mean();
}

}  // namespace

int main() {
  try {
    volt::DataLoaderOptions loader_options;
    loader_options.batch_size = 4;
    auto my_loader = std::make_shared<volt::DataLoader>(volt::testing::regression_dataset(64), loader_options);
    // --- docs/fabric.md, first example ---
volt::Fabric fabric({.strategy = "ddp:static_graph=true", .devices = 2, .precision = "bf16-mixed"});
fabric.launch();                                   // starts/joins the processes like the Trainer does
auto model = std::make_shared<Net>();
auto [module, optimizer] = fabric.setup(model, std::make_shared<torch::optim::AdamW>(model->parameters()));
auto loader = fabric.setup_dataloader(my_loader);  // this rank's share, batches on the device
for (int64_t epoch = 0; epoch < 3; ++epoch)
  for (int64_t i = 0; i < loader->num_batches(); ++i) {
    auto batch = loader->batch(i);
    auto step = fabric.accumulate(4);              // no_sync on 3 of every 4 micro-batches
    auto loss = criterion(module->forward(batch.input).to(torch::kFloat), batch.target);
    fabric.backward(loss / step.window_size());    // precision scaling + the strategy's reduction
    if (step.syncing()) { fabric.clip_gradients(*optimizer, 1.0); fabric.step(*optimizer); fabric.zero_grad(*optimizer); }
  }
fabric.save("run.ckpt", {{"model", model}, {"optimizer", optimizer}, {"epochs", int64_t{3}}});  // atomic, checksummed
fabric.unwrap_module();                            // the model whole again (fsdp: gathered back)
    // --- end of the example ---
    std::ostringstream line;
    line << std::setprecision(17) << "DOCS_LOOP rank=" << fabric.global_rank() << " step=" << fabric.global_step()
         << " params=";
    const auto flat = torch::cat({model->linear->weight.detach().flatten(), model->linear->bias.detach().flatten()})
                          .to(torch::kDouble);
    for (int64_t i = 0; i < flat.numel(); ++i) line << (i ? "," : "") << flat[i].item<double>();
    std::cout << line.str() + "\n" << std::flush;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "docs_fabric_loop: " << e.what() << std::endl;
    return 1;
  }
}

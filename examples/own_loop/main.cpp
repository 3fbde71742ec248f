// Your own loop (docs/fabric.md): the main job's CNN on Fashion-MNIST (the same model and
// data code as examples/fashion_mnist), trained by a loop written here, on any strategy and
// precision through volt::Fabric. It reads the Trainer's flags that mean something to a loop of
// one's own: --strategy, --devices, --num-nodes, --precision, --accelerator, --seed, --timeout,
// --max-epochs, --max-steps, --limit-train-batches, --limit-val-batches,
// --accumulate-grad-batches, --gradient-clip-val, --default-root-dir; e.g.
//   build/examples/own_loop --strategy ddp --devices 2 --max-epochs 1 --precision bf16-mixed
#include <boost/program_options.hpp>

#include <filesystem>
#include <iomanip>
#include <sstream>

#include "fashion_mnist/classifier.h"
#include "fashion_mnist/fashion_mnist_data.h"

namespace po = boost::program_options;

namespace {

// Accuracy over this rank's share of `loader`, summed over every rank (each sample counts once:
// evaluation loaders are split without padding). [collective]
double accuracy(volt::Fabric& fabric, volt::FabricModule<fashion_mnist::Classifier>& module,
                volt::FabricDataLoader& loader) {
  module.eval();
  torch::NoGradGuard no_grad;
  auto counts = torch::zeros({2}, torch::kDouble);
  for (int64_t i = 0; i < loader.num_batches(); ++i) {
    const auto batch = loader.batch(i);
    const auto predicted = module.forward(batch.input).argmax(1);
    counts[0] += predicted.eq(batch.target).sum().item<double>();
    counts[1] += static_cast<double>(batch.size());
  }
  module.train();
  counts = fabric.all_reduce(counts, volt::ReduceOp::Sum);
  return counts[1].item<double>() > 0 ? counts[0].item<double>() / counts[1].item<double>() : 0.0;
}

}  // namespace

int main(int argc, char** argv) {
  // With --devices N, this process starts the other ranks (fabric.launch) through run_main's
  // launcher and ends only after them.
  return volt::run_main([&](volt::ProcessLauncher& launcher) {
    fashion_mnist::FashionMnistOptions data_options;
    fashion_mnist::ClassifierOptions model_options;
    po::options_description program("own_loop options");
    program.add_options()
        ("data-dir", po::value(&data_options.data_dir)->default_value(data_options.data_dir),
         "directory with the four *-ubyte.gz files")
        ("batch-size", po::value(&data_options.batch_size)->default_value(data_options.batch_size),
         "training batch size (per process)")
        ("lr", po::value(&model_options.lr)->default_value(model_options.lr), "AdamW learning rate");
    po::variables_map values;
    auto options = volt::TrainerOptions::from_args(argc, argv, program, &values);
    if (!options.max_epochs && options.max_steps == -1) options.max_epochs = 1;
    if (!options.seed) options.seed = 42;
    data_options.seed = *options.seed;
    const int64_t epochs = options.resolved_max_epochs();
    const int64_t accumulate = options.accumulate_grad_batches;

    volt::Fabric fabric(options.run_options(), launcher);
    fabric.launch();
    fashion_mnist::FashionMnistData data(data_options);
    data.setup(volt::TrainerFn::Fitting);
    auto model = std::make_shared<fashion_mnist::Classifier>(model_options);
    auto [module, optimizer] =
        fabric.setup(model, std::make_shared<torch::optim::AdamW>(
                                model->parameters(),
                                torch::optim::AdamWOptions(model_options.lr).weight_decay(model_options.weight_decay)));
    auto train = fabric.setup_dataloader(data.train_dataloader(), options.limit_train_batches);
    auto val =
        fabric.setup_dataloader(data.val_dataloader(), options.limit_val_batches, volt::RunningStage::Validating);

    double val_acc = 0.0;
    bool done = false;
    for (int64_t epoch = 0; (epochs == -1 || epoch < epochs) && !done; ++epoch) {
      auto loss_sum = torch::zeros({}, torch::kDouble);
      int64_t batches = 0;
      for (int64_t i = 0; i < train->num_batches() && !done; ++i) {
        const auto batch = train->batch(i);
        auto step = fabric.accumulate(accumulate);  // no_sync unless this micro-batch closes its window
        // The forward ran under the precision's autocast; the loss is computed in float32.
        const auto logits = module->forward(batch.input).to(torch::kFloat);
        const auto loss = torch::nn::functional::cross_entropy(logits, batch.target);
        fabric.backward(loss / static_cast<double>(step.window_size()));
        loss_sum += loss.detach().to(torch::kDouble);
        ++batches;
        if (!step.syncing()) continue;
        if (options.gradient_clip_val) fabric.clip_gradients(*optimizer, *options.gradient_clip_val);
        fabric.step(*optimizer);
        fabric.zero_grad(*optimizer);
        done = options.max_steps != -1 && fabric.global_step() >= options.max_steps;
      }
      const double train_loss = fabric.all_reduce(loss_sum / std::max<int64_t>(1, batches)).item<double>();
      val_acc = accuracy(fabric, *module, *val);
      fabric.print("epoch ", epoch, ": train_loss=", std::fixed, std::setprecision(4), train_loss, " val_acc=", val_acc,
                   " steps=", fabric.global_step(), " skipped=", fabric.skipped_steps());
      fabric.save(std::filesystem::path(options.default_root_dir) / "own_loop.ckpt",
                  {{"model", model}, {"optimizer", optimizer}, {"epoch", epoch}});
    }
    fabric.print("own_loop: ", fabric.world_size(), " process(es), ", fabric.global_step(), " step(s), val_acc=",
                 std::fixed, std::setprecision(4), val_acc);
  });
}

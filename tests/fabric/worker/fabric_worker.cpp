// A program the Fabric's multi-process tests start (volt's launcher, --devices N). It accepts
// every Trainer flag (only the hardware, distribution and reproducibility ones, plus
// --max-epochs and --accumulate-grad-batches, are used) plus:
//   --mode train        the distributed_worker's train mode (64 regression samples, batch
//                       --batch-size per rank, seed 3; the same model, data and initial weights),
//                       as a loop of the user's own through the Fabric: accumulate(k), backward of
//                       the loss divided by the window's size (what the Trainer divides by),
//                       step and zero_grad when the micro-batch closes its window; prints
//                       "STEP rank=.. step=.. params=.." after every step (the distributed_worker's
//                       --print-steps lines), "SKIPPED rank=.. count=.." at the end;
//                       --optimizer sgd|momentum|adam as the distributed_worker's;
//                       --loss-in-autocast computes the loss inside fabric.autocast(), as the
//                       Trainer runs the whole training_step inside the precision's region;
//                       --save PATH saves model and optimizer at the end, --load PATH restores
//                       them at the start (and prints "LOADED rank=.. step=.. params=..");
//                       parameters are printed whole (through the strategy's full state dict);
//                       at the end fabric.unwrap_module() and "UNWRAPPED rank=.. params=.." read
//                       from the model itself
//   --mode collectives  all_reduce (sum, mean), broadcast of a tensor and of a decision, barrier
//                       and print checked against closed forms; prints "COLLECTIVES rank=.. ok"
// Exit status 0 only when every check held.
#include <boost/program_options.hpp>

#include <iomanip>
#include <iostream>
#include <sstream>

#include "tests/support/regression_problem.h"
#include "trainer/volt.h"

namespace po = boost::program_options;
using namespace volt;

namespace {

// The regression module with the forward a user's model has (its predict_step's output).
class RegressionNet : public testing::RegressionModule {
 public:
  using RegressionModule::RegressionModule;
  torch::Tensor forward(const torch::Tensor& x) { return predict_step(Batch{x, {}, {}}, 0); }
};

std::string joined(const torch::Tensor& values) {
  std::ostringstream text;
  text << std::setprecision(17);
  for (int64_t i = 0; i < values.numel(); ++i) text << (i ? "," : "") << values[i].item<double>();
  return text.str();
}

void print_line(const std::string& line) { std::cout << line + "\n" << std::flush; }

void train(Fabric& fabric, const TrainerOptions& options, const po::variables_map& values) {
  testing::RegressionOptions model_options;
  const auto optimizer_name = values["optimizer"].as<std::string>();
  check<ConfigurationError>(optimizer_name == "sgd" || optimizer_name == "momentum" || optimizer_name == "adam",
                            "fabric_worker: --optimizer expects sgd, momentum or adam, got '", optimizer_name, "'");
  model_options.adam = optimizer_name == "adam";
  if (optimizer_name == "momentum") model_options.momentum = 0.9;
  if (model_options.adam) model_options.lr = 0.01;
  // As the distributed_worker: seeded right before the model, so that every run starts from the
  // same weights.
  if (options.seed) seed_everything(*options.seed);
  auto model = std::make_shared<RegressionNet>(model_options);
  auto [module, optimizer] = fabric.setup(model, model->configure_optimizers().optimizers.at(0));
  auto data = testing::RegressionData(64, values["batch-size"].as<int64_t>(), false, 7, 13);
  auto loader = fabric.setup_dataloader(data.train_dataloader());
  const std::string rank = std::to_string(fabric.global_rank());
  const auto load_from = values["load"].as<std::string>();
  if (!load_from.empty()) {
    fabric.load(load_from, {{"model", model}, {"optimizer", optimizer}});
    print_line("LOADED rank=" + rank + " step=" + std::to_string(fabric.global_step()) +
               " params=" + joined(testing::full_parameters(fabric.strategy(), *model)));
  }
  const int64_t epochs = options.resolved_max_epochs();
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    for (int64_t i = 0; i < loader->num_batches(); ++i) {
      const Batch batch = loader->batch(i);
      auto step = fabric.accumulate(options.accumulate_grad_batches);
      // --skip-every N: batches N-1, 2N-1, ... run no backward, as the distributed_worker's
      // training_step returns no loss for them.
      const int64_t skip_every = values["skip-every"].as<int64_t>();
      if (skip_every == 0 || i % skip_every != skip_every - 1) {
        torch::Tensor loss;
        {
          auto region = values["loss-in-autocast"].as<bool>() ? fabric.autocast() : ScopeGuard{};
          loss = (module->forward(batch.input) - batch.target).square().mean();
        }
        fabric.backward(loss / static_cast<double>(step.window_size()));
      }
      if (!step.syncing()) continue;
      fabric.step(*optimizer);
      fabric.zero_grad(*optimizer);
      print_line("STEP rank=" + rank + " step=" + std::to_string(fabric.global_step()) +
                 " params=" + joined(testing::full_parameters(fabric.strategy(), *model)));
    }
  }
  print_line("SKIPPED rank=" + rank + " count=" + std::to_string(fabric.skipped_steps()));
  const auto save_to = values["save"].as<std::string>();
  if (!save_to.empty()) fabric.save(save_to, {{"model", model}, {"optimizer", optimizer}});
  // The end of the loop: the model whole again, read without the strategy.
  fabric.unwrap_module();
  print_line("UNWRAPPED rank=" + rank + " params=" + joined(model->flat_parameters()));
}

void collectives(Fabric& fabric) {
  const int64_t n = fabric.world_size(), rank = fabric.global_rank();
  const auto mine = torch::tensor({static_cast<double>(rank + 1)});
  const double sum = fabric.all_reduce(mine, ReduceOp::Sum).item<double>();
  check<Error>(sum == static_cast<double>(n * (n + 1) / 2), "all_reduce sum: expected ", n * (n + 1) / 2, ", got ", sum);
  const double mean = fabric.all_reduce(mine).item<double>();
  check<Error>(mean == static_cast<double>(n + 1) / 2.0, "all_reduce mean: expected ", (n + 1) / 2.0, ", got ", mean);
  const double from_last = fabric.broadcast(mine, n - 1).item<double>();
  check<Error>(from_last == static_cast<double>(n), "broadcast from rank ", n - 1, ": expected ", n, ", got ", from_last);
  const bool decision = fabric.broadcast(rank == 0);
  check<Error>(decision, "broadcast(decision): expected rank 0's true, got false");
  fabric.barrier("fabric_worker");
  check<Error>(fabric.is_global_zero() == (rank == 0), "is_global_zero: wrong on rank ", rank);
  fabric.print("PRINTED by rank ", rank, " of ", n);
  print_line("COLLECTIVES rank=" + std::to_string(rank) + " ok");
}

}  // namespace

int main(int argc, char** argv) {
  return run_main([&](ProcessLauncher& launcher) {
    po::options_description own("fabric_worker");
    own.add_options()("mode", po::value<std::string>()->default_value("train"), "train | collectives")
        ("batch-size", po::value<int64_t>()->default_value(8), "training batch size per rank (--mode train)")
        ("optimizer", po::value<std::string>()->default_value("sgd"), "sgd | momentum | adam (--mode train)")
        ("loss-in-autocast", po::bool_switch(), "compute the loss inside fabric.autocast() (--mode train)")
        ("skip-every", po::value<int64_t>()->default_value(0),
         "N > 0: batches N-1, 2N-1, ... run no backward (--mode train)")
        ("save", po::value<std::string>()->default_value(""), "save model and optimizer here at the end")
        ("load", po::value<std::string>()->default_value(""), "restore model and optimizer from here first");
    po::variables_map values;
    const auto options = TrainerOptions::from_args(argc, argv, own, &values);
    Fabric fabric(options.run_options(), launcher);
    fabric.launch();
    const auto mode = values["mode"].as<std::string>();
    if (mode == "train") return train(fabric, options, values);
    check<ConfigurationError>(mode == "collectives", "fabric_worker: --mode expects train or collectives, got '", mode, "'");
    collectives(fabric);
  });
}

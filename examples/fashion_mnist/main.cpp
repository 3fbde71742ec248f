// The main job: a small CNN on Fashion-MNIST. Accepts every Trainer flag (see --help), e.g.
//   build/examples/fashion_mnist --max-epochs 5 --precision bf16-mixed
//   build/examples/fashion_mnist --strategy ddp --devices 2
#include <boost/program_options.hpp>

#include <chrono>
#include <iomanip>
#include <iostream>

#include "core/device_memory.h"

#include "fashion_mnist/classifier.h"
#include "fashion_mnist/fashion_mnist_data.h"

namespace po = boost::program_options;

int main(int argc, char** argv) {
  // With --devices N, this process starts the other ranks through run_main's launcher and ends
  // only after them (a failed rank makes the exit status non-zero).
  return volt::run_main([&](volt::ProcessLauncher& launcher) {
    fashion_mnist::FashionMnistOptions data_options;
    fashion_mnist::ClassifierOptions model_options;
    po::options_description program("Fashion-MNIST options");
    program.add_options()("data-dir", po::value(&data_options.data_dir)->default_value(data_options.data_dir),
                          "directory with the four *-ubyte.gz files")(
        "batch-size", po::value(&data_options.batch_size)->default_value(data_options.batch_size),
        "training batch size (per process)")("val-size",
                                             po::value(&data_options.val_size)->default_value(data_options.val_size),
                                             "training images held out for validation")(
        "num-workers", po::value(&data_options.num_workers)->default_value(data_options.num_workers),
        "threads that build batches ahead of the step (0: on the training thread; the same batches either way)")(
        "pin-memory", po::value(&data_options.pin_memory)->default_value(data_options.pin_memory),
        "build batches in page-locked memory and upload the next during the step (CUDA)")(
        "lr", po::value(&model_options.lr)->default_value(model_options.lr), "AdamW learning rate")(
        "dropout", po::value(&model_options.dropout)->default_value(model_options.dropout),
        "dropout before the last layer")(
        "lr-schedule-steps",
        po::value(&model_options.lr_schedule_steps)->default_value(model_options.lr_schedule_steps),
        "steps of the cosine LR schedule (0: every step of this fit; fix it to stop and resume a run)");
    po::variables_map values;
    auto options = volt::TrainerOptions::from_args(argc, argv, program, &values);
    if (!options.max_epochs && options.max_steps == -1) options.max_epochs = 5;  // this job's default
    if (!options.seed) options.seed = 42;
    data_options.seed = *options.seed;  // --seed decides the train/val split and the shuffling too

    volt::Trainer trainer(options, launcher);
    auto data = std::make_shared<fashion_mnist::FashionMnistData>(data_options);
    auto model = std::make_shared<fashion_mnist::Classifier>(model_options);
    const auto started = std::chrono::steady_clock::now();
    trainer.fit(model, data);
    const std::chrono::duration<double> fit_time = std::chrono::steady_clock::now() - started;
    const auto metrics = trainer.test(model, data);
    if (trainer.is_global_zero()) {
      std::cout << "Final test metrics:";
      for (const auto& [name, value] : metrics)
        std::cout << " " << name << "=" << std::fixed << std::setprecision(4) << value;
      std::cout << std::endl;
      const int64_t epochs = std::max<int64_t>(trainer.current_epoch(), 1);
      std::cout << "Fit time: " << std::setprecision(1) << fit_time.count() << " s, " << epochs << " epoch(s), "
                << fit_time.count() / static_cast<double>(epochs) << " s per epoch (validation included)" << std::endl;
      if (const auto peak = volt::peak_allocated_bytes(trainer.root_device())) {
        std::cout << "Peak GPU memory: " << std::setprecision(1) << static_cast<double>(*peak) / (1 << 20)
                  << " MiB allocated on " << trainer.root_device().str() << std::endl;
      }
    }
  });
}

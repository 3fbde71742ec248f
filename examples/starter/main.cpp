// The starter: trains a small classifier on a CSV file with volt. Every Trainer flag works
// (--help lists them), and so do the program's own below, e.g.
//   build/starter --max-epochs 20
//   build/starter --strategy ddp --devices 2 --max-epochs 5
//   build/starter --csv my.csv --batch-size 64 --lr 0.003 --target-acc 0.95 --precision bf16-mixed
#include <boost/program_options.hpp>

#include <iomanip>
#include <iostream>

#include "classifier.h"
#include "csv_data.h"
#include "stop_at_accuracy.h"
#include "trainer/volt.h"

namespace po = boost::program_options;

int main(int argc, char** argv) {
  // run_main turns volt's errors into a sentence and an exit code; with --devices N it starts
  // the other local processes and waits for them.
  return volt::run_main([&](volt::ProcessLauncher& launcher) {
    starter::CsvDataOptions data_options{.path = std::string(STARTER_DATA_DIR) + "/moons.csv"};
    starter::ClassifierOptions model_options;
    double target_acc = 1.0;
    po::options_description program("Starter options");
    program.add_options()
        ("csv", po::value(&data_options.path)->default_value(data_options.path),
         "CSV file: feature columns, then the label column; a header line first")
        ("batch-size", po::value(&data_options.batch_size)->default_value(data_options.batch_size),
         "training batch size (per process)")
        ("lr", po::value(&model_options.lr)->default_value(model_options.lr), "AdamW learning rate")
        ("target-acc", po::value(&target_acc)->default_value(target_acc),
         "stop once the validation accuracy reaches this");
    po::variables_map values;
    auto options = volt::TrainerOptions::from_args(argc, argv, program, &values);
    if (!options.max_epochs && options.max_steps == -1) options.max_epochs = 10;  // this program's default
    data_options.seed = options.seed.value_or(0);

    volt::Trainer trainer(options, launcher);
    trainer.add_callback(std::make_shared<starter::StopAtAccuracy>(target_acc));
    auto data = std::make_shared<starter::CsvData>(data_options);
    data->setup(volt::TrainerFn::Fitting);  // the model's shape comes from the data
    model_options.features = data->num_features();
    model_options.classes = data->num_classes();
    trainer.fit(std::make_shared<starter::Classifier>(model_options), data);

    if (trainer.is_global_zero()) {
      const auto& metrics = trainer.callback_metrics();
      std::cout << "starter: " << trainer.strategy().topology().world_size << " process(es), "
                << trainer.current_epoch() << " epoch(s), " << trainer.global_step() << " steps";
      for (const char* name : {"val_loss", "val_acc"}) {
        if (metrics.count(name))
          std::cout << ", " << name << "=" << std::fixed << std::setprecision(4) << metrics.at(name);
      }
      std::cout << std::endl;
    }
  });
}

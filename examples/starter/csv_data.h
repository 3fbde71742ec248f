#pragma once
// A DataModule over a CSV file of numbers: every column but the last is a feature, the last is
// the class label (0, 1, ...); the first line names the columns. A fraction of the rows, drawn
// with a fixed seed, is held out for validation.
#include <memory>
#include <string>

#include "trainer/volt.h"

namespace starter {

struct CsvDataOptions {
  std::string path;                // the CSV file
  int64_t batch_size = 32;         // per process
  double val_fraction = 0.2;       // of the rows, held out for validation; in (0, 1)
  uint64_t seed = 0;               // of the split and of the shuffling
};

class CsvData : public volt::DataModule {
 public:
  explicit CsvData(CsvDataOptions options);
  // Reads the file once; every process reads it and draws the same split from the seed.
  void setup(volt::TrainerFn fn) override;
  std::shared_ptr<volt::DataLoader> train_dataloader() override;
  std::shared_ptr<volt::DataLoader> val_dataloader() override;

  int64_t num_features() const { return num_features_; }
  int64_t num_classes() const { return num_classes_; }

 private:
  CsvDataOptions options_;
  std::shared_ptr<const volt::Dataset> train_, val_;
  int64_t num_features_ = 0;
  int64_t num_classes_ = 0;
};

}  // namespace starter

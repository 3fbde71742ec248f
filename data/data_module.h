#pragma once
#include <memory>

#include "data/data_loader.h"
#include "core/run_stage.h"

namespace volt {

// Owns the data of an experiment: which datasets exist and how they are batched. setup() runs on
// every process before the loaders are asked for; a loader that is not provided is nullptr.
class DataModule {
 public:
  virtual ~DataModule() = default;
  virtual void setup(TrainerFn fn) {}
  virtual std::shared_ptr<DataLoader> train_dataloader() { return nullptr; }
  virtual std::shared_ptr<DataLoader> val_dataloader() { return nullptr; }
  virtual std::shared_ptr<DataLoader> test_dataloader() { return nullptr; }
  virtual std::shared_ptr<DataLoader> predict_dataloader() { return nullptr; }
};

}  // namespace volt

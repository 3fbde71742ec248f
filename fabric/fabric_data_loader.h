#pragma once
// The loader a Fabric hands back from setup_dataloader: the user's loader with the sampler the
// strategy chose for this rank (Placement::distribute_loader: DistributedSampler's equal, padded
// shares in training), batches moved to the device and converted by the precision
// (Placement::batch_to_device). Each batch it gives out also tells the Fabric where in the epoch the
// loop is, which is how Fabric::accumulate counts accumulation windows exactly (accumulation_window,
// as the Trainer counts them), the loader's last batch closing the last window.
//
// Batches drawn in order (0, 1, 2, ...) are built ahead on the loader's workers and uploaded
// ahead (DeviceFeed); drawing any other index starts over from there.
//
// Epochs: batch 0 drawn again after any batch of the current epoch starts the next epoch (the
// sampler's next order, as the Trainer's set_epoch each epoch); set_epoch chooses one explicitly.
// Not thread-safe.
#include <cstdint>
#include <memory>
#include <optional>

#include "data/batch.h"
#include "data/data_loader.h"
#include "strategies/device_feed.h"
#include "strategies/strategy.h"
#include "run/batch_limit.h"

namespace volt {

// Where the loop is: the batch a FabricDataLoader gave out last, of how many in its epoch.
struct LoaderPosition {
  int64_t batch_idx = -1;  // -1: no batch was drawn yet
  int64_t num_batches = 0;
};

class FabricDataLoader {
 public:
  // `limit`: how many of this rank's batches an epoch has, as the Trainer's --limit-train-batches
  // (a fraction or a count). `position` is the Fabric's, updated by batch().
  FabricDataLoader(std::shared_ptr<DataLoader> loader, BatchLimit limit, std::shared_ptr<Strategy> strategy,
                   std::shared_ptr<LoaderPosition> position);

  // Batches per epoch on this rank.
  int64_t num_batches() const;
  // The batch at `batch_idx` of the current epoch, on the strategy's device in the precision's
  // input dtype. Throws ConfigurationError for an index outside [0, num_batches()).
  Batch batch(int64_t batch_idx);

  void set_epoch(int64_t epoch);
  int64_t epoch() const { return loader_->epoch(); }
  // This rank's loader (its sampler set by the strategy).
  const DataLoader& loader() const { return *loader_; }

 private:
  std::shared_ptr<DataLoader> loader_;
  BatchLimit limit_;
  std::shared_ptr<Strategy> strategy_;
  std::shared_ptr<LoaderPosition> position_;
  bool drawn_in_epoch_ = false;
  std::optional<DeviceFeed> feed_;  // the batches from the last one drawn to the epoch's end
};

}  // namespace volt

#include "fabric/fabric_data_loader.h"

#include "core/error.h"

namespace volt {

FabricDataLoader::FabricDataLoader(std::shared_ptr<DataLoader> loader, BatchLimit limit,
                                   std::shared_ptr<Strategy> strategy, std::shared_ptr<LoaderPosition> position)
    : loader_(std::move(loader)),
      limit_(limit),
      strategy_(std::move(strategy)),
      position_(std::move(position)) {}

int64_t FabricDataLoader::num_batches() const {
  return limit_.resolve(loader_->num_batches());
}

Batch FabricDataLoader::batch(int64_t batch_idx) {
  const int64_t n = num_batches();
  check<ConfigurationError>(batch_idx >= 0 && batch_idx < n, "FabricDataLoader::batch: expected a batch index in [0, ",
                            n, "), got ", batch_idx, "; loop over i < num_batches()");
  if (batch_idx == 0 && drawn_in_epoch_) set_epoch(loader_->epoch() + 1);
  drawn_in_epoch_ = true;
  *position_ = {batch_idx, n};
  // A loop that draws the batches in order reads them from one feed, built ahead on the loader's
  // workers; any other index starts a new feed there.
  if (!feed_ || feed_->next_index() != batch_idx || feed_->stream().end() != n) {
    feed_.reset();
    feed_.emplace(DeviceFeed::open(*loader_, batch_idx, n, *strategy_));
  }
  return feed_->next();
}

void FabricDataLoader::set_epoch(int64_t epoch) {
  feed_.reset();
  loader_->set_epoch(epoch);
  drawn_in_epoch_ = false;
}

}  // namespace volt

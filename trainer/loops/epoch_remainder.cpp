#include "trainer/loops/epoch_remainder.h"

#include <algorithm>

#include "data/sampler.h"

namespace volt {

bool deals_the_global_order(const DataLoader& loader) {
  if (loader.dataset().reads_in_order()) return false;  // a stream's ranks read their own shards
  return loader.sampler_from_options() || dynamic_cast<const DistributedSampler*>(&loader.sampler()) != nullptr;
}

int64_t epoch_samples_consumed(const DataLoader& loader, int64_t replicas, int64_t epoch, int64_t next_batch,
                               const std::optional<EpochRemainder>& remainder) {
  const int64_t per_step = replicas * loader.options().batch_size;
  const int64_t consumed = remainder && remainder->epoch == epoch
                               ? remainder->first_position + (next_batch - remainder->first_batch) * per_step
                               : next_batch * per_step;
  return std::min(consumed, loader.dataset().size());
}

std::optional<EpochRemainder> epoch_remainder(const DataLoader& loader, int64_t replicas, int64_t replica,
                                              int64_t epoch, int64_t next_batch, int64_t consumed) {
  const auto& options = loader.options();
  if (consumed == next_batch * replicas * options.batch_size) return std::nullopt;
  EpochRemainder remainder;
  remainder.epoch = epoch;
  remainder.first_batch = next_batch;
  remainder.first_position = consumed;
  remainder.loader = std::make_shared<DataLoader>(loader.dataset_ptr(), options);
  remainder.loader->set_sampler(std::make_shared<DistributedSampler>(
      loader.dataset().size(), replicas, replica, options.shuffle, loader.seed(), options.drop_last, consumed));
  remainder.loader->set_epoch(epoch);
  return remainder;
}

}  // namespace volt

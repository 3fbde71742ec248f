#include "strategies/placement.h"

#include "data/sampler.h"
#include "precision/precision.h"
#include "strategies/part_context.h"

namespace volt {

Placement::DataReplica Placement::data_replica() const {
  const auto topology = context().topology();
  return {topology.global_rank, topology.world_size};
}

std::shared_ptr<DataLoader> Placement::distribute_loader(std::shared_ptr<DataLoader> loader, RunningStage stage) const {
  const auto replica = data_replica();
  if (replica.count == 1) return loader;
  // A dataset that deals itself to ranks (a stream's shards) gives this rank its share.
  if (auto share = loader->dataset().share_of_rank(replica.index, replica.count)) {
    return std::make_shared<DataLoader>(share, loader->options());
  }
  auto copy = std::make_shared<DataLoader>(loader->dataset_ptr(), loader->options());
  const int64_t n = loader->dataset().size();
  const auto& options = loader->options();
  if (stage == RunningStage::Training) {
    copy->set_sampler(std::make_shared<DistributedSampler>(n, replica.count, replica.index, options.shuffle,
                                                           loader->seed(), options.drop_last));
  } else if (evaluation_needs_equal_steps()) {
    copy->set_sampler(std::make_shared<DistributedSampler>(n, replica.count, replica.index, /*shuffle=*/false,
                                                           loader->seed(), /*drop_last=*/false));
  } else {
    copy->set_sampler(std::make_shared<UnpaddedDistributedSampler>(n, replica.count, replica.index));
  }
  return copy;
}

Batch Placement::batch_to_device(const Batch& batch, bool non_blocking) const {
  return context().precision().convert_input(batch.to(context().root_device(), non_blocking));
}

ScopeGuard Placement::forward_context(RunningStage stage) { return context().precision().forward_context(); }

}  // namespace volt

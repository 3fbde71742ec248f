#include "strategies/placement.h"

#include "data/sampler.h"
#include "precision/precision.h"
#include "strategies/part_context.h"

namespace volt {

std::shared_ptr<DataLoader> Placement::distribute_loader(std::shared_ptr<DataLoader> loader, RunningStage stage) const {
  const auto topology = context().topology();
  if (topology.world_size == 1) return loader;
  // A dataset that deals itself to ranks (a stream's shards) gives this rank its share.
  if (auto share = loader->dataset().share_of_rank(topology.global_rank, topology.world_size)) {
    return std::make_shared<DataLoader>(share, loader->options());
  }
  auto copy = std::make_shared<DataLoader>(loader->dataset_ptr(), loader->options());
  const int64_t n = loader->dataset().size();
  const auto& options = loader->options();
  if (stage == RunningStage::Training) {
    copy->set_sampler(std::make_shared<DistributedSampler>(n, topology.world_size, topology.global_rank,
                                                           options.shuffle, loader->seed(), options.drop_last));
  } else if (evaluation_needs_equal_steps()) {
    copy->set_sampler(std::make_shared<DistributedSampler>(n, topology.world_size, topology.global_rank,
                                                           /*shuffle=*/false, loader->seed(), /*drop_last=*/false));
  } else {
    copy->set_sampler(std::make_shared<UnpaddedDistributedSampler>(n, topology.world_size, topology.global_rank));
  }
  return copy;
}

Batch Placement::batch_to_device(const Batch& batch, bool non_blocking) const {
  return context().precision().convert_input(batch.to(context().root_device(), non_blocking));
}

ScopeGuard Placement::forward_context(RunningStage stage) { return context().precision().forward_context(); }

}  // namespace volt

#pragma once
// Note [The data position across world sizes]
// An epoch's samples come in one global order (data/sampler.h epoch_order: the same permutation
// whatever the world size), dealt out strided: rank r of R with batch B holds, in batch k,
// positions r + R*(k*B + j). Step k of the epoch therefore consumes positions [k*R*B, (k+1)*R*B),
// and the samples an epoch has consumed are always a prefix of its order: a checkpoint records
// how long ("epoch_samples_consumed" in the fit loop's section).
//
// A run resumed mid-epoch with the same samples per step (R*B) continues at the next batch index
// of its loader, which deals exactly the rest. With another world size or batch size it would
// not: batch k at R' ranks starts at k*R'*B'. The resumed run then draws the rest of that epoch
// from an EpochRemainder: a loader whose DistributedSampler deals the epoch's order from the first
// position not consumed, padded or cut like a whole epoch, so that no sample is skipped or
// repeated (beyond DistributedSampler's own padding at the epoch's end). The epoch's batch
// numbering continues (batch_idx keeps counting from the checkpoint's next batch), it ends when
// the remainder is dealt, and the next epoch is a whole one at the new layout. A checkpoint
// written inside the remainder records its own consumed count, so a 2 -> 3 -> 1 chain continues
// exactly too (tests/distributed/data_position_test.cpp).
//
// This holds for the order volt deals itself: the loader's own sampler (one process) or the
// DistributedSampler a strategy installs; with a dataset read in order (whose ranks read their
// own shards, Note [Streaming datasets]), batch limits (limit_train_batches, overfit_batches,
// fast_dev_run) or a sampler the user set, a resume at another layout continues at the batch index
// and warns that the rest of the epoch sees other samples.
#include <cstdint>
#include <memory>
#include <optional>

#include "data/data_loader.h"

namespace volt {

struct EpochRemainder {
  int64_t epoch = 0;
  int64_t first_batch = 0;             // the epoch's batch index of the remainder's first batch
  int64_t first_position = 0;          // the position in the epoch's order where it starts
  std::shared_ptr<DataLoader> loader;  // this rank's share of the rest of the epoch
};

// Whether `loader` deals the epoch's global order (its own sampler, or a DistributedSampler).
bool deals_the_global_order(const DataLoader& loader);

// How many positions of the epoch's order the steps before `next_batch` consumed, on `replicas`
// data-parallel replicas drawing from `loader` (Placement::data_replica: the ranks, unless ranks
// share batches, as a pipeline's stages or a tensor-parallel group do), or from `remainder` when it belongs to `epoch`;
// at most the dataset's size.
int64_t epoch_samples_consumed(const DataLoader& loader, int64_t replicas, int64_t epoch, int64_t next_batch,
                               const std::optional<EpochRemainder>& remainder);

// The rest of `epoch`, `consumed` samples in, for `replica` of `replicas` drawing from `loader`
// at batch index `next_batch`; nullopt when the loader's own batch `next_batch` already starts
// at that position (the same samples per step: a plain resume).
std::optional<EpochRemainder> epoch_remainder(const DataLoader& loader, int64_t replicas, int64_t replica,
                                              int64_t epoch, int64_t next_batch, int64_t consumed);

}  // namespace volt

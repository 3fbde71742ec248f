#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "data/batch_stream.h"
#include "data/dataset.h"
#include "data/sampler.h"

namespace volt {

class WorkerPool;

struct DataLoaderOptions {
  int64_t batch_size = 1;  // samples per batch; >= 1
  bool shuffle = false;    // a new order every epoch, drawn from `seed` + epoch
  bool drop_last = false;  // drop the last batch when it has fewer than batch_size samples
  // Shuffling seed, and the seed of every sample's random stream (Note [Per-sample randomness]);
  // the same seed gives the same order and the same augmentations on every run. Unset: the
  // Trainer's --seed decides (0 without one, and for a loader used outside a Trainer).
  std::optional<uint64_t> seed;
  // Threads that build batches ahead of the step (Note [Batches built on worker threads]); 0
  // builds each batch on the training thread when it is needed. >= 0. Any number gives the same
  // batches, bit for bit.
  int64_t num_workers = 0;
  // Batches built ahead per worker: at most num_workers × prefetch_factor batches are built or
  // waiting at once. Unset: 2. Only with num_workers > 0 (as PyTorch's DataLoader).
  std::optional<int64_t> prefetch_factor;
  // Keep the worker threads for the loader's lifetime instead of starting them for each stream
  // (each epoch, each validation) and joining them at its end. Only with num_workers > 0.
  bool persistent_workers = false;
  // Build batches in page-locked memory, which a CUDA device reads asynchronously (the Trainer
  // then uploads batch i+1 while step i runs). Without a CUDA device there is nothing to pin
  // for: one warning, and batches stay in pageable memory.
  bool pin_memory = false;
  // Turns the samples of a SampleDataset's batch into the batch, on the workers. Unset:
  // default_collate. A Dataset that is not a SampleDataset builds whole batches itself and
  // takes none.
  CollateFunction collate;

  int64_t resolved_prefetch_factor() const { return prefetch_factor.value_or(2); }
  void validate() const;
};

// Batches of a dataset in the order a sampler decides. Batches are addressed by index within the
// epoch, so a run resumed mid-epoch continues with exactly the batch it would have seen next.
// stream() hands out a range of them in order, built ahead on the workers; batch() builds one
// on the calling thread. Not thread-safe; one loader belongs to one Trainer at a time.
class DataLoader {
 public:
  explicit DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options = {});
  ~DataLoader();

  // The sampler is the seam through which a distributed strategy gives each rank its share
  // (Trainer::fit installs a DistributedSampler built from the loader's own options).
  void set_sampler(std::shared_ptr<const Sampler> sampler);
  const Sampler& sampler() const { return *sampler_; }
  // Whether the sampler is the one the options chose (none given to set_sampler).
  bool sampler_from_options() const { return own_sampler_; }

  // Selects the epoch whose order batch() and stream() draw from (the sampler's per-epoch seed).
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }

  int64_t num_batches() const;
  // The batch at `batch_index` (0-based) of the current epoch, built on the calling thread.
  Batch batch(int64_t batch_index);
  // Batches [first, end) of the current epoch, in order, built on the workers ahead of the
  // consumer (on the consumer's thread with num_workers = 0). The stream keeps the epoch it
  // started with; a later set_epoch changes only later streams.
  BatchStream stream(int64_t first, int64_t end);

  const Dataset& dataset() const { return *dataset_; }
  std::shared_ptr<const Dataset> dataset_ptr() const { return dataset_; }
  const DataLoaderOptions& options() const { return options_; }
  // The shuffling seed in use: options().seed, or 0 when unset.
  uint64_t seed() const { return options_.seed.value_or(0); }
  // Whether batches are built in page-locked memory (pin_memory, and a CUDA device to pin for).
  bool pins_memory() const { return pin_; }
  // `loader` with `seed` for an unset options().seed (a copy over the same dataset, keeping a
  // sampler set with set_sampler); `loader` itself when it has a seed of its own. How the
  // Trainer's --seed reaches loaders that leave the order to it.
  static std::shared_ptr<DataLoader> with_default_seed(std::shared_ptr<DataLoader> loader, uint64_t seed);

 private:
  const std::vector<int64_t>& order() const;
  // Builds batch i of the current epoch; `stream_first`: the first batch of the stream it
  // belongs to (-1: a batch on its own).
  BatchStream::Build builder(int64_t stream_first);

  std::shared_ptr<const Dataset> dataset_;
  const SampleDataset* sample_dataset_ = nullptr;  // dataset_ when it is one
  DataLoaderOptions options_;
  bool pin_ = false;
  std::shared_ptr<const Sampler> sampler_;
  bool own_sampler_ = true;  // the sampler the options chose (not one given to set_sampler)
  int64_t epoch_ = 0;
  // The sampler's indices for epoch_, computed on first use; shared with the streams drawing
  // from them, which a later set_epoch leaves alone.
  mutable std::shared_ptr<const std::vector<int64_t>> order_;
  std::shared_ptr<WorkerPool> persistent_pool_;  // persistent_workers: started by the first stream
};

}  // namespace volt

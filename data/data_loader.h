#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "data/dataset.h"
#include "data/sampler.h"

namespace volt {

struct DataLoaderOptions {
  int64_t batch_size = 1;  // samples per batch; >= 1
  bool shuffle = false;    // a new order every epoch, drawn from `seed` + epoch
  bool drop_last = false;  // drop the last batch when it has fewer than batch_size samples
  // Shuffling seed; the same seed gives the same order on every run. Unset: the Trainer's
  // --seed decides (0 without one, and for a loader used outside a Trainer).
  std::optional<uint64_t> seed;
  void validate() const;
};

// Batches of a dataset in the order a sampler decides. Batches are addressed by index within the
// epoch, so a run resumed mid-epoch continues with exactly the batch it would have seen next.
// Not thread-safe; one loader belongs to one Trainer at a time.
class DataLoader {
 public:
  explicit DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options = {});

  // The sampler is the seam through which a distributed strategy gives each rank its share
  // (Trainer::fit installs a DistributedSampler built from the loader's own options).
  void set_sampler(std::shared_ptr<const Sampler> sampler);
  const Sampler& sampler() const { return *sampler_; }
  // Whether the sampler is the one the options chose (none given to set_sampler).
  bool sampler_from_options() const { return own_sampler_; }

  // Selects the epoch whose order batch() draws from (the sampler's per-epoch seed).
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }

  int64_t num_batches() const;
  // The batch at `batch_index` (0-based) of the current epoch.
  Batch batch(int64_t batch_index) const;

  const Dataset& dataset() const { return *dataset_; }
  std::shared_ptr<const Dataset> dataset_ptr() const { return dataset_; }
  const DataLoaderOptions& options() const { return options_; }
  // The shuffling seed in use: options().seed, or 0 when unset.
  uint64_t seed() const { return options_.seed.value_or(0); }
  // `loader` with `seed` for an unset options().seed (a copy over the same dataset, keeping a
  // sampler set with set_sampler); `loader` itself when it has a seed of its own. How the
  // Trainer's --seed reaches loaders that leave the order to it.
  static std::shared_ptr<DataLoader> with_default_seed(std::shared_ptr<DataLoader> loader, uint64_t seed);

 private:
  const std::vector<int64_t>& order() const;

  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  std::shared_ptr<const Sampler> sampler_;
  bool own_sampler_ = true;  // the sampler the options chose (not one given to set_sampler)
  int64_t epoch_ = 0;
  mutable std::vector<int64_t> order_;  // the sampler's indices for epoch_, computed on first use
  mutable bool order_valid_ = false;
};

}  // namespace volt

#pragma once
#include <cstdint>
#include <vector>

namespace volt {

// Decides which dataset indices this process visits in an epoch, and in what order. The order is a
// pure function of (epoch, constructor arguments), so a resumed run replays it exactly.
class Sampler {
 public:
  virtual ~Sampler() = default;
  virtual std::vector<int64_t> indices(int64_t epoch) const = 0;
  // Number of indices per epoch (the same for every epoch).
  virtual int64_t size() const = 0;
};

// 0, 1, ..., n-1 every epoch.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t dataset_size);
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override { return dataset_size_; }

 private:
  int64_t dataset_size_;
};

// A permutation drawn from a generator seeded with seed + epoch.
class RandomSampler : public Sampler {
 public:
  RandomSampler(int64_t dataset_size, uint64_t seed);
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override { return dataset_size_; }

 private:
  int64_t dataset_size_;
  uint64_t seed_;
};

// The epoch's global order: the permutation drawn from seed + epoch when shuffling (what
// torch.randperm gives PyTorch's samplers), else 0, 1, ..., n-1. It does not depend on the world
// size: RandomSampler and SequentialSampler are it, DistributedSampler deals it out, so the
// samples an epoch has consumed after k steps of R ranks with batch B are its first k*R*B
// positions, whatever R and B were (Note [The data position across world sizes] in
// trainer/loops/epoch_remainder.h).
std::vector<int64_t> epoch_order(int64_t dataset_size, bool shuffle, uint64_t seed, int64_t epoch);

// torch.utils.data.DistributedSampler's semantics, with the same index order for the same
// (seed, epoch): every rank gets the same count; without drop_last the shuffled (or sequential)
// order is padded by repeating its head, with drop_last its tail is cut to a multiple of the
// number of replicas; rank r takes positions r, r + R, r + 2R, ...
// first_position > 0 deals only the epoch's order from that position on (the rest of an epoch
// that a run with another world size or batch size began), padded or cut the same way: with
// first_position = k*R*B it is exactly what batches k, k+1, ... of the whole epoch would hold.
class DistributedSampler : public Sampler {
 public:
  DistributedSampler(int64_t dataset_size, int64_t num_replicas, int64_t rank, bool shuffle,
                     uint64_t seed, bool drop_last, int64_t first_position = 0);
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override { return num_samples_; }

 private:
  int64_t dataset_size_, num_replicas_, rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t first_position_;
  int64_t num_samples_;
};

// For evaluation: rank r takes r, r + R, ... with neither padding nor shuffling, so that metrics
// aggregated over ranks (weighted by batch size) count every sample exactly once. Ranks may get
// counts that differ by one; nothing in an evaluation step may therefore be a collective.
class UnpaddedDistributedSampler : public Sampler {
 public:
  UnpaddedDistributedSampler(int64_t dataset_size, int64_t num_replicas, int64_t rank);
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override;

 private:
  int64_t dataset_size_, num_replicas_, rank_;
};

}  // namespace volt

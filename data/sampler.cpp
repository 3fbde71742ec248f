#include "data/sampler.h"

#include <torch/torch.h>

#include <numeric>

#include "core/error.h"

namespace volt {
namespace {

void check_dataset_size(int64_t dataset_size, const char* who) {
  check<ConfigurationError>(dataset_size >= 0, who, ": expected a dataset size >= 0, got ",
                            dataset_size);
}

std::vector<int64_t> sequence(int64_t n) {
  std::vector<int64_t> out(static_cast<size_t>(n));
  std::iota(out.begin(), out.end(), int64_t{0});
  return out;
}

// Same generator and call as torch.randperm(n, generator=g) with g.manual_seed(seed), which is
// what PyTorch's DistributedSampler does; this keeps volt's data order identical to PyTorch's.
std::vector<int64_t> permutation(int64_t n, uint64_t seed) {
  auto generator = at::detail::createCPUGenerator(seed);
  auto perm = torch::randperm(n, generator, torch::kLong);
  const int64_t* data = perm.data_ptr<int64_t>();
  return std::vector<int64_t>(data, data + n);
}

}  // namespace

std::vector<int64_t> epoch_order(int64_t dataset_size, bool shuffle, uint64_t seed, int64_t epoch) {
  return shuffle ? permutation(dataset_size, seed + static_cast<uint64_t>(epoch)) : sequence(dataset_size);
}

SequentialSampler::SequentialSampler(int64_t dataset_size) : dataset_size_(dataset_size) {
  check_dataset_size(dataset_size, "SequentialSampler");
}

std::vector<int64_t> SequentialSampler::indices(int64_t) const { return sequence(dataset_size_); }

RandomSampler::RandomSampler(int64_t dataset_size, uint64_t seed)
    : dataset_size_(dataset_size), seed_(seed) {
  check_dataset_size(dataset_size, "RandomSampler");
}

std::vector<int64_t> RandomSampler::indices(int64_t epoch) const {
  return epoch_order(dataset_size_, /*shuffle=*/true, seed_, epoch);
}

DistributedSampler::DistributedSampler(int64_t dataset_size, int64_t num_replicas, int64_t rank,
                                       bool shuffle, uint64_t seed, bool drop_last, int64_t first_position)
    : dataset_size_(dataset_size),
      num_replicas_(num_replicas),
      rank_(rank),
      shuffle_(shuffle),
      seed_(seed),
      drop_last_(drop_last),
      first_position_(first_position) {
  check_dataset_size(dataset_size, "DistributedSampler");
  check<ConfigurationError>(num_replicas >= 1, "DistributedSampler: expected num_replicas >= 1, got ",
                            num_replicas);
  check<ConfigurationError>(rank >= 0 && rank < num_replicas,
                            "DistributedSampler: expected a rank in [0, ", num_replicas, "), got ",
                            rank);
  check<ConfigurationError>(first_position >= 0 && first_position <= dataset_size,
                            "DistributedSampler: expected a first position in [0, ", dataset_size, "], got ",
                            first_position);
  const int64_t remaining = dataset_size_ - first_position_;
  if (drop_last_ && remaining % num_replicas_ != 0) {
    num_samples_ = remaining / num_replicas_;
  } else {
    num_samples_ = (remaining + num_replicas_ - 1) / num_replicas_;
  }
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  const std::vector<int64_t> whole = epoch_order(dataset_size_, shuffle_, seed_, epoch);
  std::vector<int64_t> order(whole.begin() + first_position_, whole.end());
  const int64_t total = num_samples_ * num_replicas_;
  if (static_cast<int64_t>(order.size()) < total && !whole.empty()) {
    // Pad by repeating the head of the epoch's order (several times when the dataset is tiny),
    // as a whole epoch is padded, so that a remainder from k*R*B pads exactly like one.
    for (size_t i = 0; static_cast<int64_t>(order.size()) < total; ++i) {
      order.push_back(whole[i % whole.size()]);
    }
  }
  order.resize(static_cast<size_t>(total));
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (int64_t i = rank_; i < total; i += num_replicas_) mine.push_back(order[static_cast<size_t>(i)]);
  return mine;
}

UnpaddedDistributedSampler::UnpaddedDistributedSampler(int64_t dataset_size, int64_t num_replicas,
                                                       int64_t rank)
    : dataset_size_(dataset_size), num_replicas_(num_replicas), rank_(rank) {
  check_dataset_size(dataset_size, "UnpaddedDistributedSampler");
  check<ConfigurationError>(num_replicas >= 1 && rank >= 0 && rank < num_replicas,
                            "UnpaddedDistributedSampler: expected 0 <= rank < num_replicas, got rank ",
                            rank, " of ", num_replicas);
}

int64_t UnpaddedDistributedSampler::size() const {
  return dataset_size_ > rank_ ? (dataset_size_ - rank_ + num_replicas_ - 1) / num_replicas_ : 0;
}

std::vector<int64_t> UnpaddedDistributedSampler::indices(int64_t) const {
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(size()));
  for (int64_t i = rank_; i < dataset_size_; i += num_replicas_) mine.push_back(i);
  return mine;
}

}  // namespace volt

#pragma once
#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "data/batch.h"
#include "data/sample.h"
#include "data/sample_random.h"

namespace volt {

// What a loader asks a dataset for: the samples at `indices`, in that order, as one batch of
// `epoch` of a loader seeded with `seed`. A sample's random work draws from random(position)
// (Note [Per-sample randomness]), never from a generator shared between samples or threads.
struct BatchRequest {
  std::vector<int64_t> indices;
  int64_t epoch = 0;
  uint64_t seed = 0;
  // Build the batch's tensors in page-locked memory (DataLoaderOptions::pin_memory with a CUDA
  // device); a batch that comes back in pageable memory is copied there by the loader.
  bool pin_memory = false;
  // Polled between samples: once it returns true nobody will read this batch (its stream was
  // abandoned), and the dataset may stop and return anything. Unset: never.
  std::function<bool()> abandoned;
  // Whether the batch just before this one in the epoch was asked for first, as part of the same
  // run of batches (a BatchStream past its first batch): a dataset read in order reads on from
  // there instead of starting over at this batch's position.
  bool continues_previous = false;

  // The random stream of the sample at `position` in `indices`.
  SampleRandom random(size_t position) const { return SampleRandom(seed, epoch, indices.at(position)); }
};

// A map-style dataset, read a batch at a time: get_batch builds the whole batch, so that a dataset
// held in memory collates with one index_select per tensor instead of one copy per sample.
// get_batch runs on the loader's worker threads, several batches at once (Note [Batches built on
// worker threads] in data/batch_stream.h): it must be safe to call concurrently, which a const
// method that touches no mutable state is.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // The samples at request.indices, in that order. Indices are in [0, size()).
  virtual Batch get_batch(const BatchRequest& request) const = 0;
  // A dataset that deals its samples to ranks itself (a StreamingDataset deals its shards)
  // returns rank `rank`'s share of it; nullptr, the default, leaves the dealing of indices to the
  // strategy's sampler (Placement::distribute_loader).
  virtual std::shared_ptr<const Dataset> share_of_rank(int64_t rank, int64_t world_size) const { return nullptr; }
  // Whether its samples can only be read in index order (a stream): a loader over it cannot
  // shuffle, and the data position does not carry to another world size.
  virtual bool reads_in_order() const { return false; }
};

// A map-style dataset read one sample at a time, like torch.utils.data.Dataset's __getitem__:
// get() returns one sample's tensors without a batch dimension, and the loader's collate
// function (default_collate unless DataLoaderOptions::collate) makes the batch, on the workers.
class SampleDataset : public Dataset {
 public:
  // The sample at `index` (in [0, size())); its random work draws from `random`.
  virtual Sample get(int64_t index, SampleRandom& random) const = 0;
  // get() for each index, then default_collate (into pinned memory when the request asks).
  Batch get_batch(const BatchRequest& request) const override;
  // get() for each index of `request`, in order; a sample that throws is named in the error,
  // with its position and epoch. Once request.abandoned returns true the rest are not read and
  // the vector comes back short.
  std::vector<Sample> get_samples(const BatchRequest& request) const;
};

// Tensors held in memory whose first dimension indexes samples (like torch.utils.data.TensorDataset).
class TensorDataset : public Dataset {
 public:
  TensorDataset(torch::Tensor input, torch::Tensor target,
                std::map<std::string, torch::Tensor> extras = {});
  int64_t size() const override;
  Batch get_batch(const BatchRequest& request) const override;

 private:
  Batch data_;
};

// A view of `indices` of another dataset (validation splits, overfit_batches, ...).
class SubsetDataset : public Dataset {
 public:
  SubsetDataset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices);
  int64_t size() const override;
  Batch get_batch(const BatchRequest& request) const override;

 private:
  std::shared_ptr<const Dataset> base_;
  std::vector<int64_t> indices_;
};

// Splits `dataset` into disjoint random subsets of the given lengths (which must sum to its size),
// reproducibly for a given seed: like torch.utils.data.random_split.
std::vector<std::shared_ptr<const Dataset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                         const std::vector<int64_t>& lengths,
                                                         uint64_t seed);

}  // namespace volt

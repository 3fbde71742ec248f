#pragma once
#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "data/batch.h"

namespace volt {

// A map-style dataset. Batches are collated by the dataset itself from a list of indices, so that a
// dataset held in memory collates with one index_select per tensor instead of one copy per sample.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // The samples at `indices`, in that order, as one batch. Indices are in [0, size()).
  virtual Batch get_batch(const std::vector<int64_t>& indices) const = 0;
};

// Tensors held in memory whose first dimension indexes samples (like torch.utils.data.TensorDataset).
class TensorDataset : public Dataset {
 public:
  TensorDataset(torch::Tensor input, torch::Tensor target,
                std::map<std::string, torch::Tensor> extras = {});
  int64_t size() const override;
  Batch get_batch(const std::vector<int64_t>& indices) const override;

 private:
  Batch data_;
};

// A view of `indices` of another dataset (validation splits, overfit_batches, ...).
class SubsetDataset : public Dataset {
 public:
  SubsetDataset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices);
  int64_t size() const override;
  Batch get_batch(const std::vector<int64_t>& indices) const override;

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

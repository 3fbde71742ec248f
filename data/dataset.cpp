#include "data/dataset.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "data/error_context.h"

namespace volt {
namespace {

torch::Tensor index_tensor(const std::vector<int64_t>& indices) {
  return torch::from_blob(const_cast<int64_t*>(indices.data()),
                          {static_cast<int64_t>(indices.size())}, torch::kLong);
}

}  // namespace

std::vector<Sample> SampleDataset::get_samples(const BatchRequest& request) const {
  std::vector<Sample> samples;
  samples.reserve(request.indices.size());
  for (size_t position = 0; position < request.indices.size(); ++position) {
    if (request.abandoned && request.abandoned()) break;
    const int64_t index = request.indices[position];
    try {
      check<ConfigurationError>(index >= 0 && index < size(), "index outside the dataset's [0, ", size(), ")");
      SampleRandom random = request.random(position);
      samples.push_back(get(index, random));
    } catch (...) {
      rethrow_with_context("sample " + std::to_string(index) + " (position " + std::to_string(position) +
                           " of its batch, epoch " + std::to_string(request.epoch) + "): ");
    }
  }
  return samples;
}

Batch SampleDataset::get_batch(const BatchRequest& request) const {
  std::vector<Sample> samples = get_samples(request);
  if (samples.size() != request.indices.size()) return {};  // abandoned
  return request.pin_memory ? default_collate_pinned(std::move(samples)) : default_collate(std::move(samples));
}

TensorDataset::TensorDataset(torch::Tensor input, torch::Tensor target,
                             std::map<std::string, torch::Tensor> extras)
    : data_{std::move(input), std::move(target), std::move(extras)} {
  const int64_t n = data_.size();
  auto check_rows = [n](const torch::Tensor& t, const std::string& name) {
    check<DataError>(!t.defined() || (t.dim() > 0 && t.size(0) == n), "TensorDataset: expected '",
                     name, "' to have ", n, " rows like the input, got shape ",
                     t.defined() ? t.sizes() : torch::IntArrayRef{});
  };
  check_rows(data_.target, "target");
  for (const auto& [key, value] : data_.extras) check_rows(value, key);
}

int64_t TensorDataset::size() const { return data_.size(); }

Batch TensorDataset::get_batch(const BatchRequest& request) const {
  const std::vector<int64_t>& indices = request.indices;
  // Note [Batches of tensors on the GPU]: a batch is a copy (a step may change it in place), made
  // without waiting for the device. Consecutive indices (every unshuffled loader) copy one slice;
  // others gather through an index that reaches the tensor's device from pinned memory
  // asynchronously: a pageable upload would wait for every kernel queued before it, and so stall
  // the step pipeline once per batch.
  const bool consecutive =
      !indices.empty() && std::adjacent_find(indices.begin(), indices.end(),
                                             [](int64_t a, int64_t b) { return b != a + 1; }) == indices.end();
  torch::Tensor index;  // the gather index, on the device of the last tensor gathered
  auto select = [&](const torch::Tensor& t) {
    if (!t.defined()) return t;
    // A batch the loader pins is gathered into page-locked memory directly, not copied there.
    const bool pin = request.pin_memory && t.is_cpu();
    if (consecutive) {
      const auto slice = t.narrow(0, indices.front(), static_cast<int64_t>(indices.size()));
      return pin ? torch::empty(slice.sizes(), slice.options().pinned_memory(true)).copy_(slice) : slice.clone();
    }
    if (!index.defined() || index.device() != t.device()) {
      index = index_tensor(indices);  // a view of `indices`, alive until this function returns
      if (!t.is_cpu()) index = index.pin_memory().to(t.device(), /*non_blocking=*/true);
    }
    if (!pin) return t.index_select(0, index);
    std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
    shape[0] = static_cast<int64_t>(indices.size());
    auto out = torch::empty(shape, t.options().pinned_memory(true));
    return torch::index_select_out(out, t, 0, index);
  };
  Batch batch{select(data_.input), select(data_.target), {}};
  for (const auto& [key, value] : data_.extras) batch.extras.emplace(key, select(value));
  return batch;
}

SubsetDataset::SubsetDataset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices)
    : base_(std::move(base)), indices_(std::move(indices)) {
  for (int64_t index : indices_) {
    check<DataError>(index >= 0 && index < base_->size(), "SubsetDataset: index ", index,
                     " is outside the base dataset of size ", base_->size());
  }
}

int64_t SubsetDataset::size() const { return static_cast<int64_t>(indices_.size()); }

Batch SubsetDataset::get_batch(const BatchRequest& request) const {
  BatchRequest mapped = request;
  mapped.indices.clear();
  mapped.indices.reserve(request.indices.size());
  for (int64_t index : request.indices) {
    check<ConfigurationError>(index >= 0 && index < size(), "SubsetDataset: index ", index, " is outside [0, ", size(),
                              ")");
    mapped.indices.push_back(indices_[static_cast<size_t>(index)]);
  }
  return base_->get_batch(mapped);
}

std::vector<std::shared_ptr<const Dataset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                         const std::vector<int64_t>& lengths,
                                                         uint64_t seed) {
  const int64_t total = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
  check<ConfigurationError>(total == dataset->size(), "random_split: expected lengths summing to ",
                            dataset->size(), ", got ", total);
  auto generator = at::detail::createCPUGenerator(seed);
  auto permutation = torch::randperm(total, generator, torch::kLong);
  const int64_t* order = permutation.data_ptr<int64_t>();
  std::vector<std::shared_ptr<const Dataset>> parts;
  int64_t offset = 0;
  for (int64_t length : lengths) {
    parts.push_back(std::make_shared<SubsetDataset>(
        dataset, std::vector<int64_t>(order + offset, order + offset + length)));
    offset += length;
  }
  return parts;
}

}  // namespace volt

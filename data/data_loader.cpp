#include "data/data_loader.h"

#include "core/error.h"

namespace volt {

void DataLoaderOptions::validate() const {
  check<ConfigurationError>(batch_size >= 1, "DataLoaderOptions: expected batch_size >= 1, got ",
                            batch_size);
}

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(options) {
  check<ConfigurationError>(dataset_ != nullptr, "DataLoader: expected a dataset, got nullptr");
  options_.validate();
  if (options_.shuffle) {
    sampler_ = std::make_shared<RandomSampler>(dataset_->size(), seed());
  } else {
    sampler_ = std::make_shared<SequentialSampler>(dataset_->size());
  }
}

void DataLoader::set_sampler(std::shared_ptr<const Sampler> sampler) {
  check<ConfigurationError>(sampler != nullptr, "DataLoader::set_sampler: expected a sampler, got nullptr");
  sampler_ = std::move(sampler);
  own_sampler_ = false;
  order_valid_ = false;
}

std::shared_ptr<DataLoader> DataLoader::with_default_seed(std::shared_ptr<DataLoader> loader, uint64_t seed) {
  if (loader->options_.seed) return loader;
  DataLoaderOptions options = loader->options_;
  options.seed = seed;
  auto copy = std::make_shared<DataLoader>(loader->dataset_, options);
  if (!loader->own_sampler_) copy->set_sampler(loader->sampler_);
  copy->set_epoch(loader->epoch_);
  return copy;
}

void DataLoader::set_epoch(int64_t epoch) {
  if (epoch != epoch_) order_valid_ = false;
  epoch_ = epoch;
}

const std::vector<int64_t>& DataLoader::order() const {
  if (!order_valid_) {
    order_ = sampler_->indices(epoch_);
    order_valid_ = true;
  }
  return order_;
}

int64_t DataLoader::num_batches() const {
  const int64_t samples = sampler_->size();
  return options_.drop_last ? samples / options_.batch_size
                            : (samples + options_.batch_size - 1) / options_.batch_size;
}

Batch DataLoader::batch(int64_t batch_index) const {
  check<ConfigurationError>(batch_index >= 0 && batch_index < num_batches(),
                            "DataLoader: batch index ", batch_index, " is outside [0, ",
                            num_batches(), ")");
  const auto& indices = order();
  const auto begin = static_cast<size_t>(batch_index * options_.batch_size);
  const auto end = std::min(indices.size(), begin + static_cast<size_t>(options_.batch_size));
  return dataset_->get_batch(std::vector<int64_t>(indices.begin() + begin, indices.begin() + end));
}

}  // namespace volt

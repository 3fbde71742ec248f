#include "data/data_loader.h"

#include <torch/cuda.h>

#include <mutex>

#include "core/error.h"
#include "core/warning.h"
#include "data/error_context.h"
#include "data/worker_pool.h"

namespace volt {
namespace {

Batch pinned(const Batch& batch) {
  auto pin = [](const torch::Tensor& t) { return t.defined() && t.is_cpu() && !t.is_pinned() ? t.pin_memory() : t; };
  Batch out{pin(batch.input), pin(batch.target), {}};
  for (const auto& [key, value] : batch.extras) out.extras.emplace(key, pin(value));
  return out;
}

bool can_pin_memory() {
  if (torch::cuda::is_available()) return true;
  static std::once_flag warned;
  std::call_once(warned, [] {
    warn("DataLoaderOptions::pin_memory: no CUDA device, so there is nothing to pin for; batches stay in pageable "
         "memory");
  });
  return false;
}

}  // namespace

void DataLoaderOptions::validate() const {
  check<ConfigurationError>(batch_size >= 1, "DataLoaderOptions: expected batch_size >= 1, got ", batch_size);
  check<ConfigurationError>(num_workers >= 0, "DataLoaderOptions: expected num_workers >= 0 (0 builds batches on the "
                            "training thread), got ", num_workers);
  check<ConfigurationError>(!prefetch_factor || num_workers > 0, "DataLoaderOptions: prefetch_factor=",
                            prefetch_factor.value_or(0), " needs worker threads to prefetch with; set num_workers > 0 "
                            "or leave prefetch_factor unset");
  check<ConfigurationError>(!prefetch_factor || *prefetch_factor >= 1,
                            "DataLoaderOptions: expected prefetch_factor >= 1 (batches built ahead per worker), got ",
                            prefetch_factor.value_or(0));
  check<ConfigurationError>(!persistent_workers || num_workers > 0, "DataLoaderOptions: persistent_workers needs "
                            "worker threads to keep; set num_workers > 0 or persistent_workers = false");
}

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  check<ConfigurationError>(dataset_ != nullptr, "DataLoader: expected a dataset, got nullptr");
  options_.validate();
  sample_dataset_ = dynamic_cast<const SampleDataset*>(dataset_.get());
  check<ConfigurationError>(!options_.collate || sample_dataset_ != nullptr,
                            "DataLoader: a collate function needs a SampleDataset (one read a sample at a time); "
                            "this dataset builds whole batches in get_batch, so collate there instead");
  check<ConfigurationError>(!options_.shuffle || !dataset_->reads_in_order(),
                            "DataLoader: this dataset is read in order (a stream), so its loader cannot shuffle; set "
                            "shuffle = false (a StreamingDataset shuffles the order of its shards each epoch)");
  pin_ = options_.pin_memory && can_pin_memory();
  if (options_.shuffle) {
    sampler_ = std::make_shared<RandomSampler>(dataset_->size(), seed());
  } else {
    sampler_ = std::make_shared<SequentialSampler>(dataset_->size());
  }
}

DataLoader::~DataLoader() = default;

void DataLoader::set_sampler(std::shared_ptr<const Sampler> sampler) {
  check<ConfigurationError>(sampler != nullptr, "DataLoader::set_sampler: expected a sampler, got nullptr");
  sampler_ = std::move(sampler);
  own_sampler_ = false;
  order_.reset();
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
  if (epoch != epoch_) order_.reset();
  epoch_ = epoch;
}

const std::vector<int64_t>& DataLoader::order() const {
  if (!order_) order_ = std::make_shared<const std::vector<int64_t>>(sampler_->indices(epoch_));
  return *order_;
}

int64_t DataLoader::num_batches() const {
  const int64_t samples = sampler_->size();
  return options_.drop_last ? samples / options_.batch_size
                            : (samples + options_.batch_size - 1) / options_.batch_size;
}

// Everything a batch depends on is captured by value (the epoch's order, the epoch, the seed,
// the dataset), so that the workers build exactly what the loader would have built on the
// calling thread, whatever the loader does meanwhile.
BatchStream::Build DataLoader::builder(int64_t stream_first) {
  order();
  return [order = order_, dataset = dataset_, samples = sample_dataset_, options = options_, pin = pin_, epoch = epoch_,
          stream_first](int64_t index, const std::function<bool()>& stop) -> Batch {
    const auto begin = static_cast<size_t>(index * options.batch_size);
    const auto end = std::min(order->size(), begin + static_cast<size_t>(options.batch_size));
    BatchRequest request{std::vector<int64_t>(order->begin() + static_cast<std::ptrdiff_t>(begin),
                                              order->begin() + static_cast<std::ptrdiff_t>(end)),
                         epoch, options.seed.value_or(0), pin, stop, stream_first >= 0 && index > stream_first};
    Batch batch;
    if (options.collate) {
      std::vector<Sample> read = samples->get_samples(request);
      if (read.size() != request.indices.size()) return {};  // abandoned
      try {
        batch = options.collate(std::move(read));
      } catch (...) {
        rethrow_with_context("the collate function: ");
      }
    } else {
      batch = dataset->get_batch(request);
    }
    if (stop && stop()) return {};
    return pin ? pinned(batch) : batch;
  };
}

Batch DataLoader::batch(int64_t batch_index) {
  check<ConfigurationError>(batch_index >= 0 && batch_index < num_batches(), "DataLoader: batch index ", batch_index,
                            " is outside [0, ", num_batches(), ")");
  return builder(-1)(batch_index, {});
}

BatchStream DataLoader::stream(int64_t first, int64_t end) {
  check<ConfigurationError>(first >= 0 && first <= end && end <= num_batches(), "DataLoader::stream: expected 0 <= "
                            "first <= end <= ", num_batches(), " (the epoch's batches), got [", first, ", ", end, ")");
  if (options_.num_workers == 0) return BatchStream(builder(first), first, end);
  std::shared_ptr<WorkerPool> pool = persistent_pool_;
  if (!pool) pool = std::make_shared<WorkerPool>(options_.num_workers);
  if (options_.persistent_workers) persistent_pool_ = pool;
  return BatchStream(builder(first), first, end, std::move(pool),
                     options_.num_workers * options_.resolved_prefetch_factor());
}

}  // namespace volt

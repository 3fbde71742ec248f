// DataLoader workers (Note [Batches built on worker threads]): any number of workers gives the
// batches of the training thread bit for bit, whatever each sample costs; at most
// num_workers × prefetch_factor batches are in flight; a worker's exception reaches the consumer
// naming the sample and stops the others; threads are kept or joined as persistent_workers says;
// bad options are errors.
#include <gtest/gtest.h>

#include <ATen/Parallel.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "tests/support/regression_problem.h"
#include "data/worker_pool.h"
#include "tests/support/test_support.h"
#include "trainer/volt.h"

namespace volt::testing {
namespace {

// Samples that cost an uneven, index-dependent time and draw a random augmentation: input =
// [index, a uniform draw, a coin], target = index.
class JitteryDataset : public SampleDataset {
 public:
  explicit JitteryDataset(int64_t n, int64_t fail_at = -1) : n_(n), fail_at_(fail_at) {}
  int64_t size() const override { return n_; }
  Sample get(int64_t index, SampleRandom& random) const override {
    ++reads;
    std::this_thread::sleep_for(std::chrono::microseconds((index * 7919) % 5 * 150));
    if (index == fail_at_) throw std::runtime_error("cannot decode record " + std::to_string(index));
    const double values[] = {static_cast<double>(index), random.uniform(), random.bernoulli(0.5) ? 1.0 : 0.0};
    return {torch::tensor(std::vector<double>(values, values + 3)), torch::tensor(index)};
  }
  mutable std::atomic<int64_t> reads{0};

 private:
  int64_t n_, fail_at_;
};

std::vector<Batch> all_batches(DataLoader& loader) {
  std::vector<Batch> out;
  BatchStream stream = loader.stream(0, loader.num_batches());
  while (stream.has_next()) out.push_back(stream.next());
  return out;
}

void expect_same_batches(const std::vector<Batch>& want, const std::vector<Batch>& got, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(want[i].input.equal(got[i].input)) << what << ", batch " << i;
    EXPECT_TRUE(want[i].target.equal(got[i].target)) << what << ", batch " << i;
  }
}

int64_t loader_threads() { return WorkerPool::running_threads(); }

TEST(DataLoaderWorkers, AnyNumberOfWorkersGivesTheBatchesOfTheTrainingThreadBitForBit) {
  auto dataset = std::make_shared<JitteryDataset>(53);
  for (const int64_t epoch : {0, 3}) {
    DataLoader reference(dataset, {.batch_size = 5, .shuffle = true, .seed = 9});
    reference.set_epoch(epoch);
    const auto want = all_batches(reference);
    for (const int64_t workers : {1, 2, 7}) {
      DataLoader loader(dataset, {.batch_size = 5, .shuffle = true, .seed = 9, .num_workers = workers});
      loader.set_epoch(epoch);
      expect_same_batches(want, all_batches(loader), std::to_string(workers) + " workers, epoch " + std::to_string(epoch));
      // A stream from the middle, as a resumed run draws it, and the random access of batch().
      BatchStream rest = loader.stream(4, 9);
      for (int64_t i = 4; i < 9; ++i) EXPECT_TRUE(rest.next().input.equal(want[static_cast<size_t>(i)].input)) << i;
      EXPECT_TRUE(loader.batch(10).input.equal(want[10].input));
    }
  }
}

TEST(DataLoaderWorkers, TheSeedTheEpochAndTheIndexAloneDecideASamplesRandomDraws) {
  SampleRandom a(5, 2, 17), b(5, 2, 17);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.bits(), b.bits());
  EXPECT_NE(SampleRandom(5, 2, 17).bits(), SampleRandom(5, 3, 17).bits());
  EXPECT_NE(SampleRandom(5, 2, 17).bits(), SampleRandom(5, 2, 18).bits());
  EXPECT_NE(SampleRandom(5, 2, 17).bits(), SampleRandom(6, 2, 17).bits());
  SampleRandom r(1, 0, 0);
  double sum = 0;
  int64_t low = 0;
  for (int i = 0; i < 20000; ++i) {
    const double u = r.uniform(2.0, 3.0);
    ASSERT_TRUE(u >= 2.0 && u < 3.0) << u;
    sum += u;
    const int64_t k = r.integer(-3, 4);
    ASSERT_TRUE(k >= -3 && k < 4) << k;
    low += k == -3;
  }
  EXPECT_NEAR(sum / 20000, 2.5, 0.01);
  EXPECT_NEAR(static_cast<double>(low) / 20000, 1.0 / 7, 0.01);
}

// A dataset of whole batches that counts how many it was asked for.
class CountingDataset : public Dataset {
 public:
  int64_t size() const override { return 400; }
  Batch get_batch(const BatchRequest& request) const override {
    ++started;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    auto index = torch::tensor(request.indices);
    return {index.to(torch::kFloat).unsqueeze(1), index};
  }
  mutable std::atomic<int64_t> started{0};
};

TEST(DataLoaderWorkers, AtMostWorkersTimesPrefetchFactorBatchesAreBuiltOrWaiting) {
  for (const auto& [workers, prefetch] : {std::pair<int64_t, int64_t>{1, 1}, {3, 2}, {2, 4}}) {
    auto dataset = std::make_shared<CountingDataset>();
    DataLoader loader(dataset, {.batch_size = 4, .num_workers = workers, .prefetch_factor = prefetch});
    const int64_t window = workers * prefetch;
    BatchStream stream = loader.stream(0, loader.num_batches());
    for (int64_t consumed = 0; consumed < 40; ++consumed) {
      // Give the workers time to run as far ahead as they may.
      std::this_thread::sleep_for(std::chrono::milliseconds(3));
      EXPECT_LE(dataset->started.load(), consumed + window) << workers << " workers, prefetch " << prefetch;
      stream.next();
    }
    EXPECT_EQ(stream.stats().batches, 40);
    EXPECT_LE(stream.stats().peak_ready_batches, window);
    EXPECT_GE(stream.stats().peak_ready_batches, 1);
    EXPECT_LE(stream.stats().peak_ready_bytes, window * (4 * 4 + 4 * 8));
  }
}

TEST(DataLoaderWorkers, AWorkersExceptionNamesTheSampleAndStopsTheOtherWorkers) {
  auto dataset = std::make_shared<JitteryDataset>(400, /*fail_at=*/37);
  DataLoader loader(dataset, {.batch_size = 4, .num_workers = 3, .prefetch_factor = 4});
  BatchStream stream = loader.stream(0, loader.num_batches());
  std::string message;
  int64_t delivered = 0;
  try {
    while (stream.has_next()) {
      stream.next();
      ++delivered;
    }
  } catch (const DataError& e) {
    message = e.what();
    // The original exception is nested inside, for a caller that wants its type.
    try {
      std::rethrow_if_nested(e);
      ADD_FAILURE() << "the worker's exception is not nested";
    } catch (const std::runtime_error& original) {
      EXPECT_EQ(std::string(original.what()), "cannot decode record 37");
    }
  }
  EXPECT_EQ(delivered, 9) << "batches 0..8 come before the one holding sample 37";
  EXPECT_NE(message.find("DataLoader: batch 9 (built by worker "), std::string::npos) << message;
  EXPECT_NE(message.find("sample 37 (position 1 of its batch, epoch 0): cannot decode record 37"), std::string::npos)
      << message;
  // The other workers stop at their next sample: nothing more is read once the stream is known to
  // have failed, however long the epoch.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const int64_t reads = dataset->reads.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(dataset->reads.load(), reads);
  EXPECT_LT(reads, 100) << "workers went on reading the epoch after the error";
  EXPECT_THROW(stream.next(), StateError);
}

TEST(DataLoaderWorkers, VoltErrorsFromADatasetKeepTheirType) {
  struct Missing : SampleDataset {
    int64_t size() const override { return 8; }
    Sample get(int64_t index, SampleRandom&) const override {
      throw DataError("ImageFolderDataset: /data/cat/3.jpg is truncated");
    }
  };
  DataLoader loader(std::make_shared<Missing>(), {.batch_size = 2, .num_workers = 2});
  BatchStream stream = loader.stream(0, 4);
  const std::string message = error_message_of<DataError>([&] { stream.next(); });
  EXPECT_NE(message.find("sample 0 (position 0 of its batch, epoch 0): ImageFolderDataset: /data/cat/3.jpg is truncated"),
            std::string::npos)
      << message;
}

TEST(DataLoaderWorkers, PersistentWorkersStayBetweenStreamsOthersEndWithTheirStream) {
  auto dataset = std::make_shared<JitteryDataset>(20);
  const int64_t before = loader_threads();
  {
    DataLoader loader(dataset, {.batch_size = 4, .num_workers = 3});
    {
      BatchStream stream = loader.stream(0, 5);
      EXPECT_EQ(loader_threads(), before + 3);
    }
    EXPECT_EQ(loader_threads(), before) << "a stream's workers are joined when it ends";
  }
  {
    DataLoader loader(dataset, {.batch_size = 4, .num_workers = 3, .persistent_workers = true});
    for (int epoch = 0; epoch < 3; ++epoch) {
      loader.set_epoch(epoch);
      all_batches(loader);
      EXPECT_EQ(loader_threads(), before + 3) << "epoch " << epoch;
    }
  }
  EXPECT_EQ(loader_threads(), before) << "the loader's destruction joins its persistent workers";
}

TEST(DataLoaderWorkers, AUserCollateRunsOnTheWorkers) {
  auto dataset = std::make_shared<JitteryDataset>(12);
  const auto consumer = std::this_thread::get_id();
  std::atomic<int64_t> on_consumer{0};
  CollateFunction collate = [&](std::vector<Sample>&& samples) {
    if (std::this_thread::get_id() == consumer) ++on_consumer;
    Batch batch = default_collate(std::move(samples));
    batch.extras["doubled"] = batch.input * 2;
    return batch;
  };
  DataLoader loader(dataset, {.batch_size = 4, .num_workers = 2, .collate = collate});
  for (const auto& batch : all_batches(loader)) EXPECT_TRUE(batch.at("doubled").equal(batch.input * 2));
  EXPECT_EQ(on_consumer.load(), 0);
}

TEST(DataLoaderWorkers, WorkersRunTorchOperationsOnTheirOwnThread) {
  struct ThreadCount : SampleDataset {
    int64_t size() const override { return 4; }
    Sample get(int64_t, SampleRandom&) const override {
      // A parallel operation, then the team size this thread would use for the next one.
      auto x = torch::ones({1 << 16}).cumsum(0);
      return {torch::tensor(static_cast<double>(at::get_num_threads())), x.sum()};
    }
  };
  DataLoader loader(std::make_shared<ThreadCount>(), {.batch_size = 2, .num_workers = 2});
  for (const auto& batch : all_batches(loader)) EXPECT_TRUE((batch.input == 1).all().item<bool>()) << batch.input;
}

TEST(DataLoaderWorkers, BadOptionsAreErrorsThatSayWhatToDo) {
  auto dataset = std::make_shared<JitteryDataset>(4);
  auto make = [&](DataLoaderOptions options) { return [=] { DataLoader loader(dataset, options); }; };
  EXPECT_NE(configuration_error_of(make({.num_workers = -1})).find("expected num_workers >= 0"), std::string::npos);
  EXPECT_NE(configuration_error_of(make({.prefetch_factor = 2})).find("set num_workers > 0"), std::string::npos);
  EXPECT_NE(configuration_error_of(make({.num_workers = 1, .prefetch_factor = 0})).find("expected prefetch_factor >= 1"),
            std::string::npos);
  EXPECT_NE(configuration_error_of(make({.persistent_workers = true})).find("persistent_workers needs"),
            std::string::npos);
  const auto tensors = std::make_shared<TensorDataset>(torch::zeros({4, 2}), torch::zeros({4}));
  const std::string message = configuration_error_of([&] {
    DataLoader loader(tensors, {.collate = [](std::vector<Sample>&& s) { return default_collate(std::move(s)); }});
  });
  EXPECT_NE(message.find("a collate function needs a SampleDataset"), std::string::npos) << message;
}

TEST(DataLoaderWorkers, DefaultCollateNamesTheSampleThatDiffers) {
  std::vector<Sample> samples;
  for (int64_t i = 0; i < 4; ++i) samples.push_back({torch::zeros({i == 2 ? 3 : 2}), torch::tensor(i)});
  const std::string message = error_message_of<DataError>([&] { default_collate(std::move(samples)); });
  EXPECT_NE(message.find("input of sample 2 of the batch has shape [3]"), std::string::npos) << message;
}

TEST(DataLoaderWorkers, PinMemoryPinsForACudaDeviceAndOtherwiseSaysThereIsNone) {
  ::testing::internal::CaptureStderr();
  DataLoader loader(std::make_shared<JitteryDataset>(8), {.batch_size = 4, .num_workers = 2, .pin_memory = true});
  const Batch batch = all_batches(loader).front();
  const std::string err = ::testing::internal::GetCapturedStderr();
  if (torch::cuda::is_available()) {
    EXPECT_TRUE(loader.pins_memory());
    EXPECT_TRUE(batch.input.is_pinned() && batch.target.is_pinned());
  } else {
    EXPECT_FALSE(loader.pins_memory());
    EXPECT_FALSE(batch.input.is_pinned());
    static bool first_time = true;  // the warning comes once per process (--gtest_repeat)
    if (first_time) {
      EXPECT_NE(err.find("pin_memory: no CUDA device"), std::string::npos) << err;
    }
    first_time = false;
  }
}

// The Trainer draws its batches from the workers (training and validation), and the weights come
// out bit for bit those of a fit without workers: shuffling, per-sample noise and dropout included.
class NoisyRegression : public SampleDataset {
 public:
  explicit NoisyRegression(std::shared_ptr<TensorDataset> base) : base_(std::move(base)) {}
  int64_t size() const override { return base_->size(); }
  Sample get(int64_t index, SampleRandom& random) const override {
    const Batch row = base_->get_batch({{index}});
    auto noise = torch::randn({row.input.size(1)}, random.torch_generator()) * 0.01;
    return {row.input[0] + noise, row.target[0]};
  }

 private:
  std::shared_ptr<TensorDataset> base_;
};

torch::Tensor fit_with_workers(int64_t workers) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.max_epochs = 2;
  options.seed = 4;
  options.accumulate_grad_batches = 2;
  torch::manual_seed(4);
  auto model = std::make_shared<RegressionModule>(RegressionOptions{.adam = true, .dropout = 0.2});
  auto data = std::make_shared<NoisyRegression>(regression_dataset(90, 8, 5));
  DataLoaderOptions loader{.batch_size = 8, .shuffle = true, .num_workers = workers};
  auto train = std::make_shared<DataLoader>(data, loader);
  loader.shuffle = false;
  auto val = std::make_shared<DataLoader>(data, loader);
  Trainer trainer(options);
  trainer.fit(model, train, val);
  return model->flat_parameters();
}

TEST(DataLoaderWorkers, TheTrainerTrainsBitForBitTheSameWithAnyNumberOfWorkers) {
  const auto reference = fit_with_workers(0);
  for (const int64_t workers : {1, 2, 7}) EXPECT_TRUE(fit_with_workers(workers).equal(reference)) << workers << " workers";
}

}  // namespace
}  // namespace volt::testing

// MemmapTokenDataset (nanoGPT's train.bin windows) and StreamingDataset over a RecordSource
// (Note [Streaming datasets]): shards dealt to ranks with no record read twice, the same samples
// with any number of workers, a resumed position that continues exactly, and clear errors.
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "data/memmap_token_dataset.h"
#include "data/streaming/streaming_dataset.h"
#include "tests/support/regression_problem.h"
#include "tests/support/test_support.h"
#include "trainer/volt.h"

namespace volt::testing {
namespace {

template <typename T>
std::string write_tokens(const TemporaryDirectory& dir, const std::string& name, int64_t count) {
  std::ofstream out(dir.file(name), std::ios::binary);
  for (int64_t i = 0; i < count; ++i) {
    const T value = static_cast<T>((i * 7) % 50021);
    out.write(reinterpret_cast<const char*>(&value), sizeof value);
  }
  return dir.file(name);
}

int64_t token_at(int64_t i) { return (i * 7) % 50021; }

TEST(MemmapTokens, SequentialWindowsCoverTheFileWithTargetsShiftedByOne) {
  TemporaryDirectory dir;
  for (const TokenDtype dtype : {TokenDtype::UInt16, TokenDtype::UInt32}) {
    const std::string path = dtype == TokenDtype::UInt16 ? write_tokens<uint16_t>(dir, "a.bin", 1001)
                                                         : write_tokens<uint32_t>(dir, "b.bin", 1001);
    MemmapTokenDataset dataset({.path = path, .dtype = dtype, .block_size = 10});
    EXPECT_EQ(dataset.size(), 100);  // (1001 - 1) / 10 windows
    EXPECT_EQ(dataset.num_tokens(), 1001);
    const Batch batch = dataset.get_batch({{3, 99}});
    ASSERT_EQ(batch.input.sizes(), (std::vector<int64_t>{2, 10}));
    ASSERT_EQ(batch.input.dtype(), torch::kLong);
    for (int64_t j = 0; j < 10; ++j) {
      EXPECT_EQ(batch.input[0][j].item<int64_t>(), token_at(30 + j));
      EXPECT_EQ(batch.target[0][j].item<int64_t>(), token_at(31 + j));
      EXPECT_EQ(batch.target[1][j].item<int64_t>(), token_at(991 + j));
    }
  }
}

TEST(MemmapTokens, RandomWindowsComeFromEachSamplesOwnStreamAndDoNotDependOnWorkers) {
  TemporaryDirectory dir;
  auto dataset = std::make_shared<MemmapTokenDataset>(MemmapTokenOptions{
      .path = write_tokens<uint16_t>(dir, "t.bin", 5000), .block_size = 32,
      .windows = MemmapTokenOptions::Windows::Random, .samples_per_epoch = 64});
  EXPECT_EQ(dataset->size(), 64);
  DataLoader serial(dataset, {.batch_size = 8, .seed = 3});
  DataLoader threaded(dataset, {.batch_size = 8, .seed = 3, .num_workers = 3});
  std::set<int64_t> starts;
  BatchStream a = serial.stream(0, 8), b = threaded.stream(0, 8);
  while (a.has_next()) {
    const Batch x = a.next(), y = b.next();
    EXPECT_TRUE(x.input.equal(y.input));
    EXPECT_TRUE(x.input.narrow(1, 1, 31).equal(x.target.narrow(1, 0, 31)));
    for (int64_t i = 0; i < 8; ++i) starts.insert(x.input[i][0].item<int64_t>());
  }
  EXPECT_GT(starts.size(), 50u) << "random windows start in different places";
  serial.set_epoch(1);
  EXPECT_FALSE(serial.batch(0).input.equal(threaded.batch(0).input)) << "another epoch, other windows";
}

TEST(MemmapTokens, BadFilesAreErrorsThatSayWhatIsWrong) {
  TemporaryDirectory dir;
  { std::ofstream(dir.file("odd.bin"), std::ios::binary) << std::string(1001, 'x'); }
  auto message = error_message_of<DataError>([&] { MemmapTokenDataset({.path = dir.file("odd.bin")}); });
  EXPECT_NE(message.find("has 1001 bytes, not a multiple of 2 (uint16 token ids)"), std::string::npos) << message;
  message = error_message_of<DataError>([&] { MemmapTokenDataset({.path = dir.file("missing.bin")}); });
  EXPECT_NE(message.find("cannot open " + dir.file("missing.bin")), std::string::npos) << message;
  const std::string small = write_tokens<uint16_t>(dir, "small.bin", 10);
  message = error_message_of<DataError>([&] { MemmapTokenDataset({.path = small, .block_size = 10}); });
  EXPECT_NE(message.find("holds 10 tokens; a window of block_size 10 needs 11"), std::string::npos) << message;
  MemmapTokenDataset capped({.path = write_tokens<uint16_t>(dir, "big.bin", 200), .block_size = 4, .vocab_size = 100});
  message = error_message_of<DataError>([&] { capped.get_batch({{5}}); });
  EXPECT_NE(message.find("not below vocab_size 100"), std::string::npos) << message;
}

// Lines "r<k>" of several files, cut into byte ranges.
std::vector<std::string> write_lines(const TemporaryDirectory& dir, int64_t files, int64_t lines) {
  std::vector<std::string> paths;
  int64_t k = 0;
  for (int64_t f = 0; f < files; ++f) {
    paths.push_back(dir.file("part" + std::to_string(f) + ".txt"));
    std::ofstream out(paths.back());
    for (int64_t i = 0; i < lines; ++i) {
      out << "r" << k << std::string(static_cast<size_t>((k * 37) % 23), '.');
      ++k;
      if (i + 1 < lines || f % 2 == 0) out << "\n";  // some files end without a newline
    }
  }
  return paths;
}

TEST(TextLines, EveryLineBelongsToExactlyOneSplit) {
  TemporaryDirectory dir;
  const auto files = write_lines(dir, 3, 101);
  for (const int64_t splits : {1, 2, 7, 64}) {
    TextLineSource source(files, splits);
    std::multiset<std::string> seen;
    for (int64_t s = 0; s < source.num_shards(); ++s) {
      auto reader = source.open(s);
      while (auto line = reader->next()) seen.insert(line->substr(0, line->find('.')));
    }
    EXPECT_EQ(seen.size(), 303u) << splits << " splits";
    for (int64_t k = 0; k < 303; ++k) EXPECT_EQ(seen.count("r" + std::to_string(k)), 1u) << splits << " splits";
  }
  TextLineSource source(files, 4);
  auto skipping = source.open(1), reading = source.open(1);
  EXPECT_EQ(skipping->skip(5), 5);
  for (int i = 0; i < 5; ++i) reading->next();
  EXPECT_EQ(*skipping->next(), *reading->next());
}

// Each record "r<k>..." decodes to the sample k (input and target).
Sample decode_record(const std::string& record, SampleRandom& random) {
  const int64_t k = std::stoll(record.substr(1, record.find('.') - 1));
  return {torch::tensor({static_cast<double>(k), random.uniform()}), torch::tensor(k)};
}

std::vector<int64_t> ids_of(DataLoader& loader) {
  std::vector<int64_t> ids;
  BatchStream stream = loader.stream(0, loader.num_batches());
  while (stream.has_next()) {
    const Batch batch = stream.next();
    for (int64_t i = 0; i < batch.size(); ++i) ids.push_back(batch.target[i].item<int64_t>());
  }
  return ids;
}

TEST(Streaming, RanksReadTheirOwnShardsAndEachRecordOnceWhateverTheWorkers) {
  TemporaryDirectory dir;
  auto source = std::make_shared<TextLineSource>(write_lines(dir, 2, 150), 3);  // 6 shards, 300 records
  auto dataset = std::make_shared<StreamingDataset>(source, decode_record, StreamingOptions{.samples_per_epoch = 240});
  std::vector<std::vector<int64_t>> per_rank_reference;
  std::set<int64_t> all;
  for (int64_t rank = 0; rank < 3; ++rank) {
    auto share = dataset->share_of_rank(rank, 3);
    EXPECT_EQ(share->size(), 80);
    DataLoader serial(share, {.batch_size = 8});
    const auto ids = ids_of(serial);
    ASSERT_EQ(ids.size(), 80u);
    for (const int64_t id : ids) EXPECT_TRUE(all.insert(id).second) << "record " << id << " read by two ranks";
    for (const int64_t workers : {1, 4}) {
      DataLoader threaded(dataset->share_of_rank(rank, 3), {.batch_size = 8, .num_workers = workers});
      EXPECT_EQ(ids_of(threaded), ids) << "rank " << rank << ", " << workers << " workers";
    }
    // Each record of the rank's share was read once by its reader.
    const auto* streaming = dynamic_cast<const StreamingDataset*>(share.get());
    EXPECT_LE(streaming->records_read(), 80 + 1024 + 64);
  }
}

TEST(Streaming, AnEpochDrawsItsShardOrderAndAResumedStreamContinuesExactly) {
  TemporaryDirectory dir;
  auto source = std::make_shared<TextLineSource>(write_lines(dir, 1, 90), 9);
  auto dataset = std::make_shared<StreamingDataset>(source, decode_record,
                                                    StreamingOptions{.samples_per_epoch = 120, .read_ahead = 16});
  DataLoader loader(dataset, {.batch_size = 10, .seed = 5, .num_workers = 2});
  const auto epoch0 = ids_of(loader);
  ASSERT_EQ(epoch0.size(), 120u);  // 90 records, then the shards again from the first
  loader.set_epoch(1);
  const auto epoch1 = ids_of(loader);
  EXPECT_NE(epoch0, epoch1) << "each epoch reads the shards in its own order";
  EXPECT_EQ(std::set<int64_t>(epoch1.begin(), epoch1.begin() + 90).size(), 90u);
  // A stream from batch 7 (a resumed run) gives batches 7.. of the whole epoch.
  BatchStream rest = loader.stream(7, 12);
  for (int64_t b = 7; b < 12; ++b) {
    const Batch batch = rest.next();
    for (int64_t i = 0; i < 10; ++i) EXPECT_EQ(batch.target[i].item<int64_t>(), epoch1[static_cast<size_t>(b * 10 + i)]);
  }
  // Batch 3 on its own (random access) is batch 3 of the epoch too.
  const Batch third = loader.batch(3);
  for (int64_t i = 0; i < 10; ++i) EXPECT_EQ(third.target[i].item<int64_t>(), epoch1[static_cast<size_t>(30 + i)]);
}

TEST(Streaming, BadSetupsAreErrorsThatSayWhatToDo) {
  TemporaryDirectory dir;
  auto source = std::make_shared<TextLineSource>(write_lines(dir, 1, 10), 2);
  auto message = configuration_error_of([&] { StreamingDataset(source, decode_record, {}); });
  EXPECT_NE(message.find("expected samples_per_epoch > 0"), std::string::npos) << message;
  StreamingDataset dataset(source, decode_record, {.samples_per_epoch = 10});
  message = configuration_error_of([&] { dataset.share_of_rank(0, 3); });
  EXPECT_NE(message.find("has 2 shards for 3 ranks"), std::string::npos) << message;
  auto shared = std::make_shared<StreamingDataset>(source, decode_record, StreamingOptions{.samples_per_epoch = 10});
  message = configuration_error_of([&] { DataLoader(shared, {.batch_size = 2, .shuffle = true}); });
  EXPECT_NE(message.find("cannot shuffle"), std::string::npos) << message;
  // A decoder that throws names the record.
  auto failing = std::make_shared<StreamingDataset>(
      source, [](const std::string& record, SampleRandom&) -> Sample { throw std::runtime_error("bad " + record); },
      StreamingOptions{.samples_per_epoch = 10});
  DataLoader loader(failing, {.batch_size = 2, .num_workers = 2});
  BatchStream stream = loader.stream(0, 5);
  message = error_message_of<DataError>([&] { stream.next(); });
  EXPECT_NE(message.find("StreamingDataset: record 0 of rank 0's epoch 0: bad r0"), std::string::npos) << message;
  // A generator whose shards hold nothing at all.
  auto empty = std::make_shared<StreamingDataset>(
      std::make_shared<GeneratorSource>(2, [](int64_t, int64_t) { return std::optional<std::string>(); }),
      decode_record, StreamingOptions{.samples_per_epoch = 4});
  message = error_message_of<DataError>([&] { DataLoader(empty, {.batch_size = 2}).batch(0); });
  EXPECT_NE(message.find("hold no records"), std::string::npos) << message;
}

// A fit over a stream stopped mid-epoch and resumed from its checkpoint trains like one that was
// never stopped.
torch::Tensor fit_stream(const std::string& root, int64_t max_steps, const std::string& save, const std::string& resume) {
  auto options = quiet_options(root);
  options.max_epochs = 2;
  options.max_steps = max_steps;
  options.seed = 1;
  torch::manual_seed(1);
  auto model = std::make_shared<RegressionModule>(RegressionOptions{.features = 2});
  auto source = std::make_shared<GeneratorSource>(4, [](int64_t shard, int64_t i) -> std::optional<std::string> {
    if (i >= 30) return std::nullopt;
    return std::to_string(shard * 100 + i);
  });
  auto dataset = std::make_shared<StreamingDataset>(
      source,
      [](const std::string& record, SampleRandom& random) -> Sample {
        const double x = std::stod(record) / 100.0;
        return {torch::tensor({x, random.uniform()}, torch::kFloat), torch::tensor({2 * x}, torch::kFloat)};
      },
      StreamingOptions{.samples_per_epoch = 100, .read_ahead = 8});
  Trainer trainer(options);
  trainer.fit(model, std::make_shared<DataLoader>(dataset, DataLoaderOptions{.batch_size = 4, .num_workers = 2}),
              nullptr, resume);
  if (!save.empty()) trainer.save_checkpoint(save);
  return model->flat_parameters();
}

TEST(Streaming, AFitResumedMidEpochTrainsLikeOneNeverStopped) {
  TemporaryDirectory dir;
  const auto whole = fit_stream(dir.file("whole"), -1, "", "");
  fit_stream(dir.file("first"), 33, dir.file("mid.ckpt"), "");  // 25 steps per epoch: stops in epoch 1
  const auto resumed = fit_stream(dir.file("rest"), -1, "", dir.file("mid.ckpt"));
  EXPECT_TRUE(resumed.equal(whole));
}

}  // namespace
}  // namespace volt::testing

#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace volt {

// One shard of a RecordSource, read from its start, in order. Not thread-safe.
class RecordReader {
 public:
  virtual ~RecordReader() = default;
  // The next record, or nullopt at the shard's end.
  virtual std::optional<std::string> next() = 0;
  // Passes over up to `count` records without handing them out (how a resumed run reaches its
  // position); returns how many there were. The default reads and drops them; a reader that can
  // jump (a generator, an index) overrides it.
  virtual int64_t skip(int64_t count);
};

// A source of records read in order rather than by index (lines of files, a generator), cut into
// a fixed number of shards that can be read independently: StreamingDataset deals them to ranks
// (Note [Streaming datasets] in data/streaming/streaming_dataset.h). Thread-safe: open() may be
// called from several threads, each reader used by one.
class RecordSource {
 public:
  virtual ~RecordSource() = default;
  virtual int64_t num_shards() const = 0;
  virtual std::unique_ptr<RecordReader> open(int64_t shard) const = 0;
  // What a shard is, for error messages ("lines 1/4 of /data/a.txt").
  virtual std::string describe(int64_t shard) const { return "shard " + std::to_string(shard); }
};

// The lines of text files (without their "\n"; a last line without one counts), each file cut
// into `splits_per_file` byte ranges at line boundaries: a range owns the lines that start in it,
// so every line belongs to exactly one shard, and one large file can still feed many ranks. The
// files are memory-mapped; skip() scans for line ends without copying.
class TextLineSource : public RecordSource {
 public:
  explicit TextLineSource(std::vector<std::string> files, int64_t splits_per_file = 1);
  int64_t num_shards() const override;
  std::unique_ptr<RecordReader> open(int64_t shard) const override;
  std::string describe(int64_t shard) const override;

 private:
  std::vector<std::string> files_;
  int64_t splits_;
};

// Records made by a function: record(shard, i) is the i-th record of `shard`, nullopt past its
// end; it is called in order, from one thread per shard at a time, and must give the same record
// for the same (shard, i) every time (a resumed run asks for the rest from its position on).
class GeneratorSource : public RecordSource {
 public:
  using Generate = std::function<std::optional<std::string>(int64_t shard, int64_t index)>;
  GeneratorSource(int64_t num_shards, Generate record);
  int64_t num_shards() const override { return shards_; }
  std::unique_ptr<RecordReader> open(int64_t shard) const override;

 private:
  int64_t shards_;
  Generate record_;
};

}  // namespace volt

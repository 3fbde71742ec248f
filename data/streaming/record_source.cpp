#include "data/streaming/record_source.h"

#include <cstring>

#include "core/error.h"
#include "data/memory_mapped_file.h"

namespace volt {

int64_t RecordReader::skip(int64_t count) {
  int64_t skipped = 0;
  while (skipped < count && next()) ++skipped;
  return skipped;
}

namespace {

// The lines that start in bytes [begin, end) of a mapped file.
class LineReader : public RecordReader {
 public:
  LineReader(std::shared_ptr<const MemoryMappedFile> file, size_t begin, size_t end)
      : file_(std::move(file)), end_(end) {
    const auto* data = reinterpret_cast<const char*>(file_->data());
    position_ = begin;
    // A range that starts inside a line leaves that line to the range it started in.
    if (begin > 0 && data[begin - 1] != '\n') {
      const void* newline = std::memchr(data + begin, '\n', file_->size() - begin);
      position_ = newline ? static_cast<size_t>(static_cast<const char*>(newline) - data) + 1 : file_->size();
    }
  }

  std::optional<std::string> next() override {
    size_t start = 0, length = 0;
    if (!advance(&start, &length)) return std::nullopt;
    return std::string(reinterpret_cast<const char*>(file_->data()) + start, length);
  }

  int64_t skip(int64_t count) override {
    int64_t skipped = 0;
    size_t start = 0, length = 0;
    while (skipped < count && advance(&start, &length)) ++skipped;
    return skipped;
  }

 private:
  // Moves past the next line: where it starts and its length without "\n".
  bool advance(size_t* start, size_t* length) {
    const size_t size = file_->size();
    if (position_ >= end_ || position_ >= size) return false;
    const auto* data = reinterpret_cast<const char*>(file_->data());
    const void* newline = std::memchr(data + position_, '\n', size - position_);
    const size_t stop = newline ? static_cast<size_t>(static_cast<const char*>(newline) - data) : size;
    *start = position_;
    *length = stop - position_;
    position_ = newline ? stop + 1 : size;  // a last line without "\n" ends the file
    return true;
  }

  std::shared_ptr<const MemoryMappedFile> file_;
  size_t position_ = 0, end_ = 0;
};

class GeneratedReader : public RecordReader {
 public:
  GeneratedReader(const GeneratorSource::Generate& record, int64_t shard) : record_(record), shard_(shard) {}
  std::optional<std::string> next() override {
    auto record = record_(shard_, index_);
    if (record) ++index_;
    return record;
  }
  int64_t skip(int64_t count) override {
    // Jumps, then checks that the shard reaches that far (the record before the new position).
    if (count <= 0) return 0;
    if (record_(shard_, index_ + count - 1)) {
      index_ += count;
      return count;
    }
    return RecordReader::skip(count);
  }

 private:
  const GeneratorSource::Generate& record_;
  int64_t shard_, index_ = 0;
};

}  // namespace

TextLineSource::TextLineSource(std::vector<std::string> files, int64_t splits_per_file)
    : files_(std::move(files)), splits_(splits_per_file) {
  check<ConfigurationError>(!files_.empty(), "TextLineSource: expected at least one file, got none");
  check<ConfigurationError>(splits_ >= 1, "TextLineSource: expected splits_per_file >= 1, got ", splits_);
  for (const auto& file : files_) MemoryMappedFile probe(file);  // a missing file fails here, naming it
}

int64_t TextLineSource::num_shards() const { return static_cast<int64_t>(files_.size()) * splits_; }

std::unique_ptr<RecordReader> TextLineSource::open(int64_t shard) const {
  check<ConfigurationError>(shard >= 0 && shard < num_shards(), "TextLineSource: shard ", shard, " is outside [0, ",
                            num_shards(), ")");
  auto file = std::make_shared<const MemoryMappedFile>(files_[static_cast<size_t>(shard / splits_)]);
  const auto split = static_cast<size_t>(shard % splits_);
  const size_t size = file->size(), splits = static_cast<size_t>(splits_);
  return std::make_unique<LineReader>(file, size * split / splits, size * (split + 1) / splits);
}

std::string TextLineSource::describe(int64_t shard) const {
  return "lines " + std::to_string(shard % splits_ + 1) + "/" + std::to_string(splits_) + " of " +
         files_[static_cast<size_t>(shard / splits_)];
}

GeneratorSource::GeneratorSource(int64_t num_shards, Generate record)
    : shards_(num_shards), record_(std::move(record)) {
  check<ConfigurationError>(shards_ >= 1, "GeneratorSource: expected at least one shard, got ", shards_);
  check<ConfigurationError>(record_ != nullptr, "GeneratorSource: expected a record function, got none");
}

std::unique_ptr<RecordReader> GeneratorSource::open(int64_t shard) const {
  check<ConfigurationError>(shard >= 0 && shard < shards_, "GeneratorSource: shard ", shard, " is outside [0, ",
                            shards_, ")");
  return std::make_unique<GeneratedReader>(record_, shard);
}

}  // namespace volt

#include "data/streaming/streaming_dataset.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <exception>

#include "core/error.h"
#include "data/error_context.h"

namespace volt {
namespace {

// Records read per turn of the reader thread between looks at what is wanted.
constexpr int64_t kChunk = 64;

// A rank's records for one epoch: its shards in the epoch's order, from their start, again from
// the first one when the last runs out.
class EpochCursor {
 public:
  EpochCursor(const RecordSource& source, std::vector<int64_t> shards, int64_t rank)
      : source_(source), shards_(std::move(shards)), rank_(rank) {}

  std::string next() {
    while (true) {
      if (!reader_) open(turn_ % static_cast<int64_t>(shards_.size()));
      if (auto record = reader_->next()) {
        ++read_in_cycle_;
        return std::move(*record);
      }
      advance();
    }
  }

  void skip(int64_t count) {
    while (count > 0) {
      if (!reader_) open(turn_ % static_cast<int64_t>(shards_.size()));
      const int64_t skipped = reader_->skip(count);
      read_in_cycle_ += skipped;
      count -= skipped;
      if (count > 0) advance();
    }
  }

 private:
  void open(int64_t position) { reader_ = source_.open(shards_[static_cast<size_t>(position)]); }
  // The current shard ran out: the next one, and a new cycle after the last.
  void advance() {
    reader_.reset();
    ++turn_;
    if (turn_ % static_cast<int64_t>(shards_.size()) == 0) {
      check<DataError>(read_in_cycle_ > 0, "StreamingDataset: the shards of rank ", rank_, " hold no records (",
                       source_.describe(shards_.front()), (shards_.size() > 1 ? ", ..." : ""),
                       "); give the source more data or more shards");
      read_in_cycle_ = 0;
    }
  }

  const RecordSource& source_;
  std::vector<int64_t> shards_;
  int64_t rank_;
  std::unique_ptr<RecordReader> reader_;
  int64_t turn_ = 0;           // shards opened so far, over the cycles
  int64_t read_in_cycle_ = 0;  // records read since the current cycle began
};

}  // namespace

void StreamingOptions::validate() const {
  check<ConfigurationError>(samples_per_epoch > 0, "StreamingDataset: expected samples_per_epoch > 0, got ",
                            samples_per_epoch, "; a stream has no length of its own, and every rank must take the "
                            "same number of steps, so say how many samples an epoch has (over all ranks)");
  check<ConfigurationError>(read_ahead >= 1, "StreamingDataset: expected read_ahead >= 1, got ", read_ahead);
}

// The reader thread of one rank (Note [Streaming datasets]). It reads the records of `epoch`
// (drawn with `seed`) from position `next` on into `ready`, while fewer than read_ahead wait there
// or a batch waits for a record not yet read. A new target (another epoch or position) discards
// what was read for the old one (`generation`).
struct StreamingDataset::Reader {
  std::mutex mutex;
  std::condition_variable changed;
  bool targeted = false;
  int64_t epoch = 0;
  uint64_t seed = 0;
  int64_t next = 0;  // the position of the next record the thread reads
  uint64_t generation = 0;
  std::map<int64_t, std::string> ready;
  int64_t wanted = -1;  // the last position a waiting batch needs
  int64_t waiting = 0;  // batches waiting in take()
  std::exception_ptr error;
  bool stopping = false;
  int64_t records_read = 0;
  std::thread thread;

  void retarget(int64_t new_epoch, uint64_t new_seed, int64_t position) {
    targeted = true;
    epoch = new_epoch;
    seed = new_seed;
    next = position;
    ++generation;
    ready.clear();
    error = nullptr;
    changed.notify_all();
  }
};

StreamingDataset::StreamingDataset(std::shared_ptr<const RecordSource> source, RecordDecoder decode,
                                   StreamingOptions options)
    : StreamingDataset(std::move(source), std::move(decode), std::move(options), 0, 1) {}

StreamingDataset::StreamingDataset(std::shared_ptr<const RecordSource> source, RecordDecoder decode,
                                   StreamingOptions options, int64_t rank, int64_t world_size)
    : source_(std::move(source)), decode_(std::move(decode)), options_(std::move(options)), rank_(rank),
      world_size_(world_size) {
  check<ConfigurationError>(source_ != nullptr, "StreamingDataset: expected a record source, got nullptr");
  check<ConfigurationError>(decode_ != nullptr, "StreamingDataset: expected a record decoder, got none");
  options_.validate();
  check<ConfigurationError>(source_->num_shards() >= world_size_, "StreamingDataset: the source has ",
                            source_->num_shards(), " shards for ", world_size_, " ranks, so some rank would read "
                            "nothing; cut it into at least one shard per rank (TextLineSource's splits_per_file)");
  check<ConfigurationError>(options_.samples_per_epoch >= world_size_, "StreamingDataset: samples_per_epoch ",
                            options_.samples_per_epoch, " gives no sample to each of ", world_size_, " ranks");
  reader_ = std::make_unique<Reader>();
  Reader& reader = *reader_;
  reader.thread = std::thread([this, &reader] {
    std::optional<EpochCursor> cursor;
    uint64_t cursor_generation = 0;
    while (true) {
      int64_t epoch = 0, position = 0;
      uint64_t seed = 0, generation = 0;
      {
        std::unique_lock<std::mutex> lock(reader.mutex);
        reader.changed.wait(lock, [&] {
          return reader.stopping || (reader.targeted && !reader.error &&
                                     (static_cast<int64_t>(reader.ready.size()) < options_.read_ahead ||
                                      reader.next <= reader.wanted));
        });
        if (reader.stopping) return;
        epoch = reader.epoch;
        seed = reader.seed;
        position = reader.next;
        generation = reader.generation;
      }
      std::vector<std::string> records;
      std::exception_ptr error;
      try {
        if (!cursor || cursor_generation != generation) {
          // The epoch's shard order, then the records before the position passed over.
          std::vector<int64_t> order = shards();
          if (options_.shuffle_shards) {
            SampleRandom random(seed, epoch, -1 - rank_);
            for (size_t i = order.size(); i > 1; --i) {
              std::swap(order[i - 1], order[static_cast<size_t>(random.integer(0, static_cast<int64_t>(i)))]);
            }
          }
          cursor.emplace(*source_, std::move(order), rank_);
          cursor->skip(position);
          cursor_generation = generation;
        }
        for (int64_t i = 0; i < kChunk; ++i) records.push_back(cursor->next());
      } catch (...) {
        error = std::current_exception();
        cursor.reset();
      }
      std::lock_guard<std::mutex> lock(reader.mutex);
      if (reader.generation != generation) continue;  // retargeted meanwhile: this chunk is stale
      if (error) {
        reader.error = error;
      } else {
        for (auto& record : records) reader.ready.emplace(reader.next++, std::move(record));
        reader.records_read += static_cast<int64_t>(records.size());
      }
      reader.changed.notify_all();
    }
  });
  const std::string name = "volt-stream-" + std::to_string(rank_);
  pthread_setname_np(reader.thread.native_handle(), name.substr(0, 15).c_str());
}

StreamingDataset::~StreamingDataset() {
  {
    std::lock_guard<std::mutex> lock(reader_->mutex);
    reader_->stopping = true;
  }
  reader_->changed.notify_all();
  reader_->thread.join();
}

int64_t StreamingDataset::size() const { return options_.samples_per_epoch / world_size_; }

std::vector<int64_t> StreamingDataset::shards() const {
  std::vector<int64_t> mine;
  for (int64_t s = rank_; s < source_->num_shards(); s += world_size_) mine.push_back(s);
  return mine;
}

int64_t StreamingDataset::records_read() const {
  std::lock_guard<std::mutex> lock(reader_->mutex);
  return reader_->records_read;
}

std::shared_ptr<const Dataset> StreamingDataset::share_of_rank(int64_t rank, int64_t world_size) const {
  check<ConfigurationError>(rank_ == 0 && world_size_ == 1, "StreamingDataset: this is already rank ", rank_, " of ",
                            world_size_, "'s share");
  return std::shared_ptr<const Dataset>(new StreamingDataset(source_, decode_, options_, rank, world_size));
}

std::vector<std::string> StreamingDataset::take(int64_t first, int64_t count,
                                                const std::function<bool()>& abandoned) const {
  Reader& reader = *reader_;
  std::unique_lock<std::mutex> lock(reader.mutex);
  const int64_t last = first + count - 1;
  ++reader.waiting;
  reader.wanted = std::max(reader.wanted, last);
  reader.changed.notify_all();
  std::vector<std::string> records;
  while (true) {
    if (abandoned && abandoned()) break;
    if (reader.error) {
      --reader.waiting;
      std::rethrow_exception(reader.error);
    }
    bool have = reader.ready.count(first) && reader.next > last;
    if (have) {
      for (int64_t p = first; p <= last; ++p) {
        auto found = reader.ready.find(p);
        records.push_back(std::move(found->second));
        reader.ready.erase(found);
      }
      break;
    }
    reader.changed.wait_for(lock, std::chrono::milliseconds(50));
  }
  if (--reader.waiting == 0) reader.wanted = -1;
  reader.changed.notify_all();
  return records;
}

Batch StreamingDataset::get_batch(const BatchRequest& request) const {
  const auto n = static_cast<int64_t>(request.indices.size());
  const int64_t first = request.indices.front();
  for (int64_t i = 0; i < n; ++i) {
    check<ConfigurationError>(
        request.indices[static_cast<size_t>(i)] == first + i && first + i < size(),
        "StreamingDataset: a batch must be consecutive positions of the rank's epoch, within [0, ", size(),
        "); a streaming dataset is read in order, so do not shuffle its loader");
  }
  {
    // Where the reader has to be: at this batch, unless the batch continues a run of batches
    // (Note [Streaming datasets]) whose records the reader is already reading.
    Reader& reader = *reader_;
    std::lock_guard<std::mutex> lock(reader.mutex);
    const int64_t lowest = reader.ready.empty() ? reader.next : reader.ready.begin()->first;
    const bool same_epoch = reader.targeted && reader.epoch == request.epoch && reader.seed == request.seed;
    const bool in_reach = same_epoch && first >= lowest && (request.continues_previous || first == lowest);
    if (!in_reach) reader.retarget(request.epoch, request.seed, first);
  }
  std::vector<std::string> records;
  try {
    records = take(first, n, request.abandoned);
  } catch (...) {
    rethrow_with_context("StreamingDataset (rank " + std::to_string(rank_) + " of " + std::to_string(world_size_) +
                         "): ");
  }
  if (static_cast<int64_t>(records.size()) != n) return {};  // abandoned
  std::vector<Sample> samples;
  samples.reserve(records.size());
  for (int64_t i = 0; i < n; ++i) {
    if (request.abandoned && request.abandoned()) return {};
    const int64_t position = first + i;
    try {
      // A sample's stream from its place in the whole epoch (rank r's p-th: p * R + r), so that
      // the ranks' samples at the same position draw differently.
      SampleRandom random(request.seed, request.epoch, position * world_size_ + rank_);
      samples.push_back(decode_(records[static_cast<size_t>(i)], random));
    } catch (...) {
      rethrow_with_context("StreamingDataset: record " + std::to_string(position) + " of rank " +
                           std::to_string(rank_) + "'s epoch " + std::to_string(request.epoch) + ": ");
    }
  }
  return request.pin_memory ? default_collate_pinned(std::move(samples)) : default_collate(std::move(samples));
}

}  // namespace volt

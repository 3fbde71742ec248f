#pragma once
// Note [Streaming datasets]: a source read in order (lines of files, a generator) has no index to
// deal out, so a StreamingDataset deals its shards instead: rank r of R reads the shards s with
// s mod R = r, each record by exactly one rank. Within a rank the work is split in two stages,
// as in SPDL's pipelines: one reader thread reads the rank's records in order, ahead of need (the
// I/O stage), and the loader's workers turn them into samples (the decode stage, in parallel), so
// that the order of the samples is the order of the records whatever the number of workers, and
// each record is read once and decoded once. A stream has no length, and every rank must take the
// same number of steps (or the ranks' collectives would not match), so an epoch has the number of
// samples given (samples_per_epoch, WebDataset's with_epoch): each rank yields samples_per_epoch /
// R of them, reading its shards from their start in an order drawn from (seed, epoch), cycling
// through them again if they run out first. Sample p of rank r's epoch is thus a pure function of
// (seed, epoch, R, r, p): a run resumed mid-epoch at the same world size reaches its position by
// skipping p records (RecordReader::skip: a scan for line ends, no decoding) and goes on exactly;
// at another world size the shards go to other ranks, and it continues at the batch index with
// the warning that the rest of the epoch sees other samples.
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "data/dataset.h"
#include "data/streaming/record_source.h"

namespace volt {

// Turns one record into a sample, on the loader's workers (several at once).
using RecordDecoder = std::function<Sample(const std::string& record, SampleRandom& random)>;

struct StreamingOptions {
  // Samples in an epoch over all ranks (each rank yields samples_per_epoch / world_size); > 0.
  int64_t samples_per_epoch = 0;
  // Read each rank's shards in an order drawn from (seed, epoch); false: in shard order.
  bool shuffle_shards = true;
  // Records the reader thread keeps read ahead of the workers; >= 1.
  int64_t read_ahead = 1024;
  void validate() const;
};

// A dataset over a RecordSource (Note [Streaming datasets]). Its indices are positions in this
// rank's epoch: a loader over it reads them in order (shuffle is refused; shuffle the shards).
// Distributed strategies give each rank share_of_rank(rank, world_size). Thread-safe.
class StreamingDataset : public Dataset {
 public:
  StreamingDataset(std::shared_ptr<const RecordSource> source, RecordDecoder decode, StreamingOptions options);
  ~StreamingDataset() override;

  int64_t size() const override;
  Batch get_batch(const BatchRequest& request) const override;
  std::shared_ptr<const Dataset> share_of_rank(int64_t rank, int64_t world_size) const override;
  bool reads_in_order() const override { return true; }

  int64_t rank() const { return rank_; }
  int64_t world_size() const { return world_size_; }
  // The shards this rank reads, in shard order.
  std::vector<int64_t> shards() const;
  // Records this rank's reader has read since it started (tests: each is read once).
  int64_t records_read() const;

 private:
  StreamingDataset(std::shared_ptr<const RecordSource> source, RecordDecoder decode, StreamingOptions options,
                   int64_t rank, int64_t world_size);
  struct Reader;  // the reader thread and the records it read ahead
  // Records [first, first + count) of the epoch the reader is on, once it has read them.
  std::vector<std::string> take(int64_t first, int64_t count, const std::function<bool()>& abandoned) const;

  std::shared_ptr<const RecordSource> source_;
  RecordDecoder decode_;
  StreamingOptions options_;
  int64_t rank_ = 0, world_size_ = 1;
  std::unique_ptr<Reader> reader_;
};

}  // namespace volt

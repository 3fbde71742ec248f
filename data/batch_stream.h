#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

#include "data/batch.h"

namespace volt {

class WorkerPool;

// Note [Batches built on worker threads]: a DataLoader with num_workers > 0 builds its batches on
// a pool of threads (data/worker_pool.h), ahead of the training thread, the way SPDL's pipelines
// and PyTorch's DataLoader do, but in one process: a batch built by a worker is the tensors the
// step reads, with no pickling, no shared-memory file and no second copy. What makes it safe to
// run ahead is that a batch is a pure function of its index: batch i of an epoch holds the
// samples the sampler put at positions [i*B, (i+1)*B) of the epoch's order, and their random work
// draws from (seed, epoch, sample index) (Note [Per-sample randomness]). So the workers may build
// batches in any order and at any speed: the stream hands them out in index order, and 0, 1 or 7
// workers give the same bits, also from a resumed position. The window bounds memory: at most
// num_workers × prefetch_factor batches are built or waiting at any time (PyTorch's bound).

// The batches [first, end) of one epoch, in index order. With a pool, `window` of them are built
// ahead on it; without one each is built on the calling thread by next(). An exception thrown
// while building batch i reaches the caller of next() for batch i, with the batch and the worker
// named (rethrow_with_context in data/error_context.h), and the stream stops: the batches after
// it are not built. Destroying the stream abandons what it has in flight; a batch being built
// stops at its next sample (the `stop` its build function polls).
//
// Not thread-safe: one consumer. Builds run concurrently on the pool's threads.
class BatchStream {
 public:
  // Builds batch `index`; polls `stop` between samples and may return early once it is true
  // (the batch is then discarded).
  using Build = std::function<Batch(int64_t index, const std::function<bool()>& stop)>;

  // What a stream measured, for the benchmarks and the Trainer's data-wait figure.
  struct Stats {
    int64_t batches = 0;                // handed out by next()
    int64_t peak_ready_batches = 0;     // most batches built and waiting for next() at once
    int64_t peak_ready_bytes = 0;       // bytes of their tensors at that moment's peak
    double wait_seconds = 0;            // time next() spent waiting for a batch (or building it)
  };

  BatchStream(Build build, int64_t first, int64_t end);
  BatchStream(Build build, int64_t first, int64_t end, std::shared_ptr<WorkerPool> pool, int64_t window);
  BatchStream(BatchStream&&) noexcept;
  BatchStream& operator=(BatchStream&&) noexcept;
  ~BatchStream();

  bool has_next() const { return next_ < end_; }
  // The index next() returns next.
  int64_t next_index() const { return next_; }
  int64_t end() const { return end_; }
  // The next batch in index order; blocks until it is built. StateError past the end or after a
  // build failed.
  Batch next();
  // Whether next() would return without waiting: its batch is built (always false without a pool).
  bool next_ready() const;
  Stats stats() const;

 private:
  struct Shared;
  void submit(int64_t index);

  std::shared_ptr<Shared> shared_;
  std::shared_ptr<WorkerPool> pool_;
  int64_t first_ = 0;
  int64_t next_ = 0;
  int64_t end_ = 0;
  int64_t submitted_ = 0;  // batches [next_, submitted_) are queued, being built or ready
  int64_t window_ = 1;
  bool failed_ = false;
};

}  // namespace volt

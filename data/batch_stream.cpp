#include "data/batch_stream.h"

#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <optional>

#include "core/error.h"
#include "data/error_context.h"
#include "data/worker_pool.h"

namespace volt {
namespace {

int64_t batch_bytes(const Batch& batch) {
  auto bytes = [](const torch::Tensor& t) { return t.defined() ? static_cast<int64_t>(t.nbytes()) : 0; };
  int64_t total = bytes(batch.input) + bytes(batch.target);
  for (const auto& [key, value] : batch.extras) total += bytes(value);
  return total;
}

}  // namespace

// What the stream and the tasks it submitted share: the tasks may outlive the stream object (a
// pool that persists across epochs finishes an abandoned task after the stream is gone).
struct BatchStream::Shared {
  Build build;
  std::atomic<bool> stopped{false};
  std::mutex mutex;
  std::condition_variable ready;
  struct Outcome {
    std::optional<Batch> batch;
    std::exception_ptr error;
    int64_t worker = -1;
  };
  std::map<int64_t, Outcome> done;  // built batches not yet handed out, by index
  int64_t ready_bytes = 0;
  Stats stats;
};

BatchStream::BatchStream(Build build, int64_t first, int64_t end)
    : shared_(std::make_shared<Shared>()), first_(first), next_(first), end_(end), submitted_(first) {
  check<ConfigurationError>(first >= 0 && first <= end, "BatchStream: expected 0 <= first <= end, got [", first, ", ",
                            end, ")");
  shared_->build = std::move(build);
}

BatchStream::BatchStream(Build build, int64_t first, int64_t end, std::shared_ptr<WorkerPool> pool, int64_t window)
    : BatchStream(std::move(build), first, end) {
  check<ConfigurationError>(window >= 1, "BatchStream: expected a window of at least one batch, got ", window);
  pool_ = std::move(pool);
  window_ = window;
  while (submitted_ < end_ && submitted_ - next_ < window_) submit(submitted_++);
}

BatchStream::BatchStream(BatchStream&&) noexcept = default;
BatchStream& BatchStream::operator=(BatchStream&& other) noexcept {
  if (this != &other) {
    if (shared_) shared_->stopped = true;
    shared_ = std::move(other.shared_);
    pool_ = std::move(other.pool_);
    first_ = other.first_;
    next_ = other.next_;
    end_ = other.end_;
    submitted_ = other.submitted_;
    window_ = other.window_;
    failed_ = other.failed_;
  }
  return *this;
}

BatchStream::~BatchStream() {
  if (shared_) shared_->stopped = true;
}

void BatchStream::submit(int64_t index) {
  pool_->submit([shared = shared_, index](int64_t worker) {
    if (shared->stopped) return;
    Shared::Outcome outcome;
    outcome.worker = worker;
    try {
      outcome.batch = shared->build(index, [&shared] { return shared->stopped.load(); });
    } catch (...) {
      outcome.error = std::current_exception();
    }
    if (shared->stopped) return;
    {
      std::lock_guard<std::mutex> lock(shared->mutex);
      if (outcome.batch) {
        shared->ready_bytes += batch_bytes(*outcome.batch);
        const auto ready = static_cast<int64_t>(shared->done.size()) + 1;
        auto& stats = shared->stats;
        if (ready > stats.peak_ready_batches) stats.peak_ready_batches = ready;
        if (shared->ready_bytes > stats.peak_ready_bytes) stats.peak_ready_bytes = shared->ready_bytes;
      }
      shared->done.emplace(index, std::move(outcome));
    }
    shared->ready.notify_all();
  });
}

Batch BatchStream::next() {
  check<StateError>(!failed_, "BatchStream: a batch of this stream failed to build earlier (its error was thrown "
                    "then); start a new stream (DataLoader::stream) to go on");
  check<StateError>(has_next(), "BatchStream: no batch after index ", end_ - 1, "; the stream covers [", first_,
                    ", ", end_, ")");
  const int64_t index = next_;
  const auto started = std::chrono::steady_clock::now();
  Shared::Outcome outcome;
  if (!pool_) {
    try {
      outcome.batch = shared_->build(index, {});
    } catch (...) {
      outcome.error = std::current_exception();
    }
  } else {
    std::unique_lock<std::mutex> lock(shared_->mutex);
    shared_->ready.wait(lock, [&] { return shared_->done.count(index) != 0; });
    auto found = shared_->done.find(index);
    outcome = std::move(found->second);
    shared_->done.erase(found);
    if (outcome.batch) shared_->ready_bytes -= batch_bytes(*outcome.batch);
  }
  const std::chrono::duration<double> waited = std::chrono::steady_clock::now() - started;
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->stats.wait_seconds += waited.count();
    if (!outcome.error) ++shared_->stats.batches;
  }
  if (outcome.error) {
    failed_ = true;
    shared_->stopped = true;  // the other workers take no more of this stream's batches
    try {
      std::rethrow_exception(outcome.error);
    } catch (...) {
      rethrow_with_context("DataLoader: batch " + std::to_string(index) +
                           (pool_ ? " (built by worker " + std::to_string(outcome.worker) + ")" : std::string()) +
                           ": ");
    }
  }
  ++next_;
  if (pool_ && submitted_ < end_) submit(submitted_++);
  return std::move(*outcome.batch);
}

bool BatchStream::next_ready() const {
  if (!pool_ || !has_next()) return false;
  std::lock_guard<std::mutex> lock(shared_->mutex);
  return shared_->done.count(next_) != 0;
}

BatchStream::Stats BatchStream::stats() const {
  std::lock_guard<std::mutex> lock(shared_->mutex);
  return shared_->stats;
}

}  // namespace volt

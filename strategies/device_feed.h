#pragma once
// Note [Uploading the next batch during the step]: a batch built in page-locked memory
// (DataLoaderOptions::pin_memory) can reach a CUDA device without the host waiting for the copy.
// DeviceFeed issues batch i+1's upload on a copy stream of its own while step i's kernels run on
// the compute stream, records an event after it, and makes the compute stream wait for that event
// when batch i+1 is handed out: the step never waits for a copy it could have overlapped, and the
// host never synchronizes (no cudaStreamSynchronize, no pageable copy). The tensors were
// allocated on the copy stream and are used on the compute stream, so each is marked as used
// there (record_stream): the caching allocator then does not reuse their memory before the
// compute stream is done with them. Batch i+1 is taken from the BatchStream only when a worker
// has already built it, so that the training thread never waits for data it does not need yet.
// On the CPU, or with pageable batches, it is Placement::batch_to_device, one batch at a time.
#include <memory>
#include <optional>

#include "data/batch_stream.h"
#include "data/data_loader.h"
#include "strategies/placement.h"

namespace volt {

class Strategy;

// The batches of a BatchStream on the strategy's device, in order. Not thread-safe; the
// placement must outlive it.
class DeviceFeed {
 public:
  // `upload_ahead`: whether the stream's batches are pinned and the device a CUDA device.
  DeviceFeed(BatchStream stream, const Placement& placement, bool upload_ahead);
  ~DeviceFeed();
  DeviceFeed(DeviceFeed&&) noexcept;
  DeviceFeed& operator=(DeviceFeed&&) noexcept;

  bool has_next() const;
  // The index of the batch next() returns.
  int64_t next_index() const;
  // The next batch on the device, ready for the current stream's kernels.
  Batch next();
  const BatchStream& stream() const { return stream_; }

  // Batches [first, end) of `loader`'s current epoch on `strategy`'s device, uploaded ahead when
  // the loader pins its batches and the device is a CUDA device. How the Trainer's loops and the
  // Fabric's loader draw batches.
  static DeviceFeed open(DataLoader& loader, int64_t first, int64_t end, const Strategy& strategy);

 private:
  struct Upload;  // a batch in flight to the device (CUDA only)
  void start_upload();

  BatchStream stream_;
  const Placement* placement_;
  bool upload_ahead_;
  std::unique_ptr<Upload> ahead_;
  int64_t next_ = 0;
};

}  // namespace volt

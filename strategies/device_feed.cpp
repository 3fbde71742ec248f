#include "strategies/device_feed.h"

#if defined(VOLT_WITH_CUDA)
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "core/compat.h"
#include "core/error.h"
#include "strategies/strategy.h"

namespace volt {

#if defined(VOLT_WITH_CUDA)
struct DeviceFeed::Upload {
  Batch batch;
  at::cuda::CUDAEvent copied;
};

namespace {

void for_each_tensor(const Batch& batch, const std::function<void(const torch::Tensor&)>& f) {
  if (batch.input.defined()) f(batch.input);
  if (batch.target.defined()) f(batch.target);
  for (const auto& [key, value] : batch.extras) {
    if (value.defined()) f(value);
  }
}

}  // namespace
#else
struct DeviceFeed::Upload {};
#endif

DeviceFeed::DeviceFeed(BatchStream stream, const Placement& placement, bool upload_ahead)
    : stream_(std::move(stream)), placement_(&placement), upload_ahead_(upload_ahead && compat::kBuiltWithCuda),
      next_(stream_.next_index()) {}

DeviceFeed::~DeviceFeed() = default;
DeviceFeed::DeviceFeed(DeviceFeed&&) noexcept = default;
DeviceFeed& DeviceFeed::operator=(DeviceFeed&&) noexcept = default;

bool DeviceFeed::has_next() const { return ahead_ != nullptr || stream_.has_next(); }

int64_t DeviceFeed::next_index() const { return next_; }

DeviceFeed DeviceFeed::open(DataLoader& loader, int64_t first, int64_t end, const Strategy& strategy) {
  const bool ahead = loader.pins_memory() && strategy.root_device().is_cuda();
  return DeviceFeed(loader.stream(first, end), strategy.placement(), ahead);
}

void DeviceFeed::start_upload() {
#if defined(VOLT_WITH_CUDA)
  Batch host = stream_.next();
  auto upload = std::make_unique<Upload>();
  const auto compute = c10::cuda::getCurrentCUDAStream();
  const auto copy = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, compute.device_index());
  {
    c10::cuda::CUDAStreamGuard on_copy_stream(copy);
    upload->batch = placement_->batch_to_device(host, /*non_blocking=*/true);
    upload->copied.record(copy);
  }
  ahead_ = std::move(upload);
#endif
}

Batch DeviceFeed::next() {
  check<StateError>(has_next(), "DeviceFeed: no batch after index ", next_ - 1);
  ++next_;
  if (!upload_ahead_) return placement_->batch_to_device(stream_.next());
#if defined(VOLT_WITH_CUDA)
  if (!ahead_) start_upload();
  std::unique_ptr<Upload> current = std::move(ahead_);
  const auto compute = c10::cuda::getCurrentCUDAStream();
  current->copied.block(compute);
  for_each_tensor(current->batch, [&](const torch::Tensor& t) {
    if (t.is_cuda()) c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), compute);
  });
  // The next upload starts now, behind this step's kernels on the other stream, if its batch
  // is built; otherwise when it is asked for.
  if (stream_.has_next() && stream_.next_ready()) start_upload();
  return std::move(current->batch);
#else
  return placement_->batch_to_device(stream_.next());
#endif
}

}  // namespace volt

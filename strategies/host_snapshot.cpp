// Note [Snapshots of device memory].
#include "strategies/host_snapshot.h"

#if defined(VOLT_WITH_CUDA)
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <map>
#include <optional>
#include <utility>
#endif

namespace volt {

#if defined(VOLT_WITH_CUDA)
// Per device the snapshot copied from: its copy stream, and the event recorded after its copies.
struct HostSnapshot::Copies {
  struct OnDevice {
    std::optional<c10::cuda::CUDAStream> stream;
    at::cuda::CUDAEvent copied;
    bool pending = false;
  };
  std::map<c10::DeviceIndex, OnDevice> devices;

  // The copy stream of `device`, ordered after what its current (compute) stream has issued so
  // far: the values copied are those the training thread sees.
  c10::cuda::CUDAStream stream_for(c10::DeviceIndex device) {
    auto& on = devices[device];
    if (!on.stream) on.stream = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device);
    if (!on.pending) {
      at::cuda::CUDAEvent issued;
      issued.record(c10::cuda::getCurrentCUDAStream(device));
      issued.block(*on.stream);
      on.pending = true;
    }
    return *on.stream;
  }

  // After the last copy of a take(): each compute stream waits for its copies on the device.
  void close() {
    for (auto& [device, on] : devices) {
      if (!on.pending) continue;
      on.copied.record(*on.stream);
      on.copied.block(c10::cuda::getCurrentCUDAStream(device));
    }
  }

  void wait() {
    for (auto& [device, on] : devices) {
      // Not pending any more even when the synchronization throws (a device error): the next
      // take() starts its copies after the compute stream again, never on a stale order.
      const bool pending = std::exchange(on.pending, false);
      if (pending) on.copied.synchronize();
    }
  }
};
#else
struct HostSnapshot::Copies {
  void close() {}
  void wait() {}
};
#endif

HostSnapshot::HostSnapshot() : copies_(std::make_unique<Copies>()) {}
HostSnapshot::~HostSnapshot() = default;

c10::IValue HostSnapshot::take(const c10::IValue& value) {
  next_ = 0;
  auto snapshot = copy_all(value);
  staging_.resize(next_);
  copies_->close();
  return snapshot;
}

void HostSnapshot::wait_until_copied() { copies_->wait(); }

int64_t HostSnapshot::held_bytes() const {
  int64_t bytes = 0;
  for (const auto& t : staging_) bytes += t.numel() * static_cast<int64_t>(t.element_size());
  return bytes;
}

int64_t HostSnapshot::pinned_bytes() const {
  int64_t bytes = 0;
  for (const auto& t : staging_) {
    if (t.is_pinned()) bytes += t.numel() * static_cast<int64_t>(t.element_size());
  }
  return bytes;
}

// A host copy of `tensor`, into the host tensor of the previous snapshot at the same place when
// that one fits (same shape and dtype, pinned when the source is on a CUDA device).
torch::Tensor HostSnapshot::copy(const torch::Tensor& tensor) {
  const auto source = tensor.detach();
  const bool from_cuda = source.is_cuda();
  torch::Tensor host;
  if (next_ < staging_.size() && source.layout() == torch::kStrided && staging_[next_].sizes() == source.sizes() &&
      staging_[next_].scalar_type() == source.scalar_type() && (!from_cuda || staging_[next_].is_pinned())) {
    host = staging_[next_];
  } else if (from_cuda && source.layout() == torch::kStrided) {
    host = torch::empty(source.sizes(), source.options().device(torch::kCPU).pinned_memory(true));
  }
  if (!host.defined()) {
    host = source.to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true);  // sparse, or a CPU tensor's first copy
  } else if (from_cuda) {
#if defined(VOLT_WITH_CUDA)
    const auto stream = copies_->stream_for(source.device().index());
    c10::cuda::CUDAStreamGuard on_copy_stream(stream);
    host.copy_(source, /*non_blocking=*/true);
    c10::cuda::CUDACachingAllocator::recordStream(source.storage().data_ptr(), stream);
#endif
  } else {
    host.copy_(source);
  }
  if (next_ < staging_.size()) {
    staging_[next_] = host;
  } else {
    staging_.push_back(host);
  }
  ++next_;
  return host;
}

c10::IValue HostSnapshot::copy_all(const c10::IValue& value) {
  if (value.isTensor()) return copy(value.toTensor());
  if (value.isTensorList()) {
    std::vector<torch::Tensor> copies;
    for (const auto& tensor : value.toTensorVector()) copies.push_back(copy(tensor));
    return copies;
  }
  if (value.isGenericDict()) {
    const auto dict = value.toGenericDict();
    c10::impl::GenericDict result(dict.keyType(), dict.valueType());
    for (const auto& entry : dict) result.insert(entry.key(), copy_all(entry.value()));
    return result;
  }
  if (value.isList()) {
    const auto list = value.toList();
    c10::impl::GenericList result(list.elementType());
    for (const auto& element : list) result.push_back(copy_all(element));
    return result;
  }
  if (value.isTuple()) {
    std::vector<c10::IValue> elements;
    for (const auto& element : value.toTupleRef().elements()) elements.push_back(copy_all(element));
    return c10::ivalue::Tuple::create(std::move(elements));
  }
  return value;  // strings, numbers, booleans, None: immutable
}

}  // namespace volt

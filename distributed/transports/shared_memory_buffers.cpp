// SharedMemoryGroup's buffers and its all_reduce in place (Note [all_reduce in place through
// shared memory]).
#include <algorithm>
#include <cstring>
#include <mutex>
#include <new>

#include "core/error.h"
#include "distributed/transports/shared_memory_group.h"
#include "distributed/transports/shared_memory_internal.h"

namespace volt {

namespace {

// all_reduce in place reduces a rank's slice this much at a time: over every rank's buffer into
// rank 0's, then copied into the others' while it is still in this core's cache.
constexpr int64_t kInPlaceBlockBytes = int64_t{256} << 10;

}  // namespace

SharedMemoryGroup::Buffers::~Buffers() {
  std::lock_guard<std::mutex> lock(registry->mutex);
  registry->live.erase(std::remove(registry->live.begin(), registry->live.end(), this), registry->live.end());
}

// Note [all_reduce in place through shared memory]
// A tensor that lives in a buffer segment every rank has mapped (allocate_buffers: DDP's buckets)
// is reduced where it lies, with no copy into a slot and none out of the result: once every rank
// has arrived ("written"), each rank reduces its slice over every rank's buffer, in rank order,
// into rank 0's, and copies the result into every other rank's buffer, a block at a time while
// the block is in its cache ("reduced"); once every rank is past that, every buffer holds the
// whole result. A rank's slice of another's buffer is written only between that rank's arrival
// and its leaving, so no rank reads a buffer its owner is changing. Same order and so the same
// bits as through the slots, and the same on every rank; two synchronizations whatever the size.
std::vector<torch::Tensor> SharedMemoryGroup::allocate_buffers(const Exchange& exchange,
                                                               const std::vector<int64_t>& numels,
                                                               const std::vector<c10::ScalarType>& dtypes,
                                                               std::string* why_not) {
  check_usable();
  VOLT_INTERNAL_ASSERT(numels.size() == dtypes.size(), "SharedMemoryGroup::allocate_buffers: a dtype per buffer");
  std::vector<size_t> offsets;
  size_t region_bytes = 0;
  for (size_t i = 0; i < numels.size(); ++i) {
    offsets.push_back(region_bytes);
    region_bytes += round_up(static_cast<size_t>(numels[i]) * c10::elementSize(dtypes[i]), 4096);
  }
  region_bytes = std::max<size_t>(region_bytes, 4096);
  const int64_t id = next_buffers_id_++;
  using Header = Buffers::Header;
  std::string problem;
  auto segment = share_segment(
      exchange, rank_, Buffers::kRegionsStart + static_cast<size_t>(size_) * region_bytes,
      [&](char* at) { new (at) Header{kBuffersSegment, size_, region_bytes, id}; },
      [&](const char* at) {
        const auto* header = reinterpret_cast<const Header*>(at);
        return header->kind == kBuffersSegment && header->size == size_ && header->region_bytes == region_bytes &&
               header->id == id;
      },
      problem);
  if (!segment) {
    if (why_not) *why_not = problem;
    return {};
  }
  auto buffers = std::make_shared<Buffers>(std::move(segment), region_bytes, id, registry_);
  {
    std::lock_guard<std::mutex> lock(registry_->mutex);
    registry_->live.push_back(buffers.get());
  }
  std::vector<torch::Tensor> tensors;
  for (size_t i = 0; i < numels.size(); ++i) {
    // Zeros: the segment's pages are new. Each tensor keeps the segment mapped.
    tensors.push_back(torch::from_blob(buffers->region(rank_) + offsets[i], {numels[i]}, [buffers](void*) {},
                                       torch::TensorOptions().dtype(dtypes[i])));
  }
  return tensors;
}

std::pair<const SharedMemoryGroup::Buffers*, int64_t> SharedMemoryGroup::find_buffer(
    const torch::Tensor& tensor) const {
  const auto* begin = static_cast<const char*>(tensor.data_ptr());
  const auto* end = begin + tensor.numel() * static_cast<int64_t>(tensor.element_size());
  std::lock_guard<std::mutex> lock(registry_->mutex);
  for (const Buffers* buffers : registry_->live) {
    const char* region = buffers->region(rank_);
    if (begin >= region && end <= region + buffers->region_bytes) return {buffers, begin - region};
  }
  return {nullptr, -1};
}

void SharedMemoryGroup::all_reduce_in_place(torch::Tensor& tensor, ReduceOp op, const Buffers& buffers,
                                            int64_t offset) {
  torch::NoGradGuard no_grad;
  const auto dtype = tensor.scalar_type();
  const auto element = static_cast<int64_t>(tensor.element_size());
  const int64_t numel = tensor.numel();
  const int64_t generation = begin_chunk(true, kAllReduce, numel, static_cast<int32_t>(dtype), static_cast<int32_t>(op),
                                         -1, buffers.id, offset);
  finish_step(0, generation);
  wait_for_all(0, generation, "all_reduce");
  check_calls_agree(kAllReduce);
  const auto in = [&](int64_t r) { return buffers.region(r) + offset; };
  const auto [begin, end] = slice_of(numel, element);
  const int64_t block = kInPlaceBlockBytes / element;
  for (int64_t at = begin; at < end; at += block) {
    const int64_t n = std::min(block, end - at);
    reduce_into(dtype, op, at, n, in(0) + at * element, in);
    for (int64_t r = 1; r < size_; ++r)
      std::memcpy(in(r) + at * element, in(0) + at * element, static_cast<size_t>(n * element));
  }
  finish_step(1, generation);
  wait_for_all(1, generation, "all_reduce");
  finish_step(2, generation);
}

}  // namespace volt

// See Note [Inline all_reduce] in inline_gloo_all_reduce.h.
#include "distributed/transports/inline_gloo_all_reduce.h"

#include "core/error.h"

#if defined(VOLT_WITH_INLINE_GLOO)
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/rendezvous/context.h>
#endif

namespace volt {

#if defined(VOLT_WITH_INLINE_GLOO)

struct InlineGlooAllReduce::Context {
  std::shared_ptr<gloo::rendezvous::Context> gloo;
};

namespace {

template <typename T>
const gloo::ReductionFunction<T>* reduce_function(ReduceOp op) {
  switch (op) {
    case ReduceOp::Max: return gloo::ReductionFunction<T>::max;
    case ReduceOp::Min: return gloo::ReductionFunction<T>::min;
    case ReduceOp::Sum:
    case ReduceOp::Mean: break;
  }
  return gloo::ReductionFunction<T>::sum;
}

// Note [bfloat16 over Gloo] (process_group_communicator.cpp): Gloo has no bfloat16 reduction;
// these round each pairwise result to bfloat16, as c10::BFloat16's operators do.
void sum_bf16(c10::BFloat16* x, const c10::BFloat16* y, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(x[i]) + static_cast<float>(y[i]);
}
void max_bf16(c10::BFloat16* x, const c10::BFloat16* y, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = std::max(static_cast<float>(x[i]), static_cast<float>(y[i]));
}
void min_bf16(c10::BFloat16* x, const c10::BFloat16* y, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = std::min(static_cast<float>(x[i]), static_cast<float>(y[i]));
}

template <>
const gloo::ReductionFunction<c10::BFloat16>* reduce_function<c10::BFloat16>(ReduceOp op) {
  static const gloo::ReductionFunction<c10::BFloat16> sum(gloo::CUSTOM, &sum_bf16), max(gloo::CUSTOM, &max_bf16),
      min(gloo::CUSTOM, &min_bf16);
  switch (op) {
    case ReduceOp::Max: return &max;
    case ReduceOp::Min: return &min;
    case ReduceOp::Sum:
    case ReduceOp::Mean: break;
  }
  return &sum;
}

// In sync mode both ends of an exchange write before they read, so one exchange must fit in the
// socket buffers (the sender's send buffer plus the receiver's window: over 80 KiB with Linux's
// defaults, before any autotuning) or both block until the timeout. 16 MiB at once did exactly
// that on loopback. Chunks of 64 KiB keep every exchange at or below 64 KiB, at ~60 us a chunk.
constexpr int64_t kChunkBytes = 64 << 10;

// Halving-doubling: log2(n) exchanges of shrinking halves, then the mirror-image all-gather;
// for the latency-bound sizes taken here it beats the ring's 2(n-1) steps.
// A tensor of several chunks goes through one staging chunk and one algorithm, run once per
// chunk: setting an algorithm up (buffers, slots) costs more than running it on 64 KiB. Every
// element is reduced on its own, so the stale tail of the last chunk's staging is harmless.
template <typename T>
void all_reduce(const std::shared_ptr<gloo::rendezvous::Context>& context, torch::Tensor& tensor, ReduceOp op) {
  T* data = tensor.data_ptr<T>();
  const int64_t numel = tensor.numel(), chunk = kChunkBytes / static_cast<int64_t>(sizeof(T));
  if (numel <= chunk) {
    gloo::AllreduceHalvingDoubling<T>(context, {data}, static_cast<int>(numel), reduce_function<T>(op)).run();
    return;
  }
  std::vector<T> staging(static_cast<size_t>(chunk));
  gloo::AllreduceHalvingDoubling<T> algorithm(context, {staging.data()}, static_cast<int>(chunk),
                                              reduce_function<T>(op));
  for (int64_t offset = 0; offset < numel; offset += chunk) {
    const auto count = static_cast<size_t>(std::min(chunk, numel - offset));
    std::copy(data + offset, data + offset + count, staging.begin());
    algorithm.run();
    std::copy(staging.begin(), staging.begin() + static_cast<std::ptrdiff_t>(count), data + offset);
  }
}

}  // namespace

bool InlineGlooAllReduce::compiled_in() { return true; }

InlineGlooAllReduce::InlineGlooAllReduce(const c10::intrusive_ptr<c10d::Store>& store, int64_t rank, int64_t size,
                                         const std::shared_ptr<gloo::transport::Device>& device,
                                         std::chrono::milliseconds timeout, int64_t max_bytes)
    : context_(std::make_unique<Context>()), max_bytes_(max_bytes) {
  context_->gloo = std::make_shared<gloo::rendezvous::Context>(static_cast<int>(rank), static_cast<int>(size));
  context_->gloo->setTimeout(timeout);
  c10d::ProcessGroupGloo::GlooStore gloo_store(store);
  auto shared_device = device;  // connectFullMesh takes a non-const reference
  context_->gloo->connectFullMesh(gloo_store, shared_device);
  // Sync mode: the calling thread reads its peers' sockets itself (blocking, no busy polling)
  // instead of Gloo's event-loop thread reading and then waking it, one hand-off less per
  // message: 1 KiB between two processes here took 21 us instead of 360-900 us.
  for (int peer = 0; peer < static_cast<int>(size); ++peer) {
    if (peer != rank) context_->gloo->getPair(peer)->setSync(true, /*busyPoll=*/false);
  }
}

bool InlineGlooAllReduce::accepts(const torch::Tensor& tensor, ReduceOp op) const {
  const auto type = tensor.scalar_type();
  const bool bf16 = type == torch::kBFloat16;
  const bool supported =
      bf16 || type == torch::kFloat || type == torch::kDouble || type == torch::kInt || type == torch::kLong;
  return supported && tensor.device().is_cpu() && tensor.is_contiguous() && tensor.numel() > 0 &&
         (bf16 || tensor.numel() * static_cast<int64_t>(tensor.element_size()) <= max_bytes_);
}

void InlineGlooAllReduce::run(torch::Tensor& tensor, ReduceOp op) {
  VOLT_INTERNAL_ASSERT(accepts(tensor, op), "the inline all_reduce accepts this tensor");
  std::lock_guard<std::mutex> lock(mutex_);
  check<DistributedError>(context_->gloo != nullptr, "the inline Gloo context was closed after an earlier failed "
                          "all_reduce; the group cannot be used any more");
  try {
    switch (tensor.scalar_type()) {
      case torch::kFloat: all_reduce<float>(context_->gloo, tensor, op); break;
      case torch::kDouble: all_reduce<double>(context_->gloo, tensor, op); break;
      case torch::kInt: all_reduce<int32_t>(context_->gloo, tensor, op); break;
      case torch::kBFloat16: all_reduce<c10::BFloat16>(context_->gloo, tensor, op); break;
      default: all_reduce<int64_t>(context_->gloo, tensor, op); break;
    }
  } catch (...) {
    // A peer may be blocked waiting for this rank's part of the collective; closing the
    // connections fails it at once ("connection closed") instead of at the timeout.
    context_->gloo.reset();
    throw;
  }
}

#else  // Gloo cannot be linked beside this LibTorch: nothing is taken inline.

struct InlineGlooAllReduce::Context {};

bool InlineGlooAllReduce::compiled_in() { return false; }

InlineGlooAllReduce::InlineGlooAllReduce(const c10::intrusive_ptr<c10d::Store>&, int64_t, int64_t,
                                         const std::shared_ptr<gloo::transport::Device>&, std::chrono::milliseconds,
                                         int64_t max_bytes)
    : max_bytes_(max_bytes) {}

bool InlineGlooAllReduce::accepts(const torch::Tensor&, ReduceOp) const { return false; }

void InlineGlooAllReduce::run(torch::Tensor&, ReduceOp) {
  VOLT_INTERNAL_ASSERT(false, "the inline all_reduce is not compiled in");
}

#endif

InlineGlooAllReduce::~InlineGlooAllReduce() = default;

}  // namespace volt

#include "run/graph/captured_graph.h"

#include "core/error.h"

#if defined(VOLT_WITH_CUDA)
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace volt {

#if defined(VOLT_WITH_CUDA)
namespace {

class CudaGraph final : public CapturedGraph {
 public:
  explicit CudaGraph(const torch::Device& device) : device_(device) {}

  void capture(const std::function<void()>& body) override {
    check<StateError>(graph_ == nullptr, "CapturedGraph::capture: this graph already holds a capture");
    c10::cuda::CUDAGuard device_guard(device_);
    auto graph = std::make_unique<at::cuda::CUDAGraph>();
    graph->register_generator_state(at::cuda::detail::getDefaultCUDAGenerator(device_.index()));
    // A pool of its own, whose id this object knows, so that a failed capture can give it back.
    const auto pool = at::cuda::graph_pool_handle();
    // Capture runs on a side stream (the default stream cannot capture) ordered after the work
    // already queued on the current stream, and the current stream continues after it.
    const auto current = c10::cuda::getCurrentCUDAStream(device_.index());
    const auto side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device_.index());
    at::cuda::CUDAEvent before;
    before.record(current);
    before.block(side);
    {
      c10::cuda::CUDAStreamGuard stream_guard(side);
      // Thread-local mode: the data pipeline's threads keep copying the next batches meanwhile.
      graph->capture_begin(pool, cudaStreamCaptureModeThreadLocal);
      try {
        body();
        graph->capture_end();
      } catch (const c10::Error& error) {
        // What the device refused (a read on the host, a synchronization, a CPU operation).
        abandon(side, pool);
        throw NotSupportedError(std::string("the step cannot be captured in a CUDA graph: ") +
                                error.what_without_backtrace());
      } catch (...) {
        abandon(side, pool);  // the body's own error, which the caller reports as it is
        throw;
      }
    }
    at::cuda::CUDAEvent after;
    after.record(side);
    after.block(current);
    graph_ = std::move(graph);
  }

  void replay() override {
    check<StateError>(graph_ != nullptr, "CapturedGraph::replay: nothing was captured");
    graph_->replay();
  }

 private:
  // Ends a capture that failed: the stream leaves capture mode, the allocator stops serving the
  // pool and frees what it held, and the CUDA error the failure left behind is cleared. The
  // at::cuda::CUDAGraph object is then destroyed, which forgets its capture id.
  void abandon(const c10::cuda::CUDAStream& stream, const at::cuda::MempoolId_t& pool) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream.stream(), &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
      cudaGraph_t partial = nullptr;
      (void)cudaStreamEndCapture(stream.stream(), &partial);
      if (partial != nullptr) (void)cudaGraphDestroy(partial);
    }
    (void)cudaGetLastError();
    c10::cuda::CUDACachingAllocator::endAllocateToPool(device_.index(), pool);
    at::getHostAllocator(at::kCUDA)->end_allocate_to_pool(pool);
    c10::cuda::CUDACachingAllocator::releasePool(device_.index(), pool);
    at::getHostAllocator(at::kCUDA)->release_pool(pool);
  }

  torch::Device device_;
  std::unique_ptr<at::cuda::CUDAGraph> graph_;
};

}  // namespace

bool cuda_graphs_compiled() { return true; }

std::unique_ptr<CapturedGraph> make_cuda_graph(const torch::Device& device) {
  check<NotSupportedError>(device.is_cuda(), "a CUDA graph needs a CUDA device, and this step runs on ",
                           device.str());
  return std::make_unique<CudaGraph>(device);
}

bool capturing_on(const torch::Device& device) {
  if (!device.is_cuda()) return false;
  c10::cuda::CUDAGuard device_guard(device);
  return c10::cuda::currentStreamCaptureStatusMayInitCtx() != c10::cuda::CaptureStatus::None;
}
#else
bool cuda_graphs_compiled() { return false; }

std::unique_ptr<CapturedGraph> make_cuda_graph(const torch::Device& device) {
  throw NotSupportedError(
      "this build of volt has no CUDA (its LibTorch is CPU-only), so it cannot capture CUDA graphs; "
      "build against a LibTorch with CUDA (docs/building.md)");
}

bool capturing_on(const torch::Device&) { return false; }
#endif

}  // namespace volt

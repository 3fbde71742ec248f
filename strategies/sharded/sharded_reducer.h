#pragma once
// ShardedDDP's gradient reduction (fairscale's ShardedDataParallel; ZeRO stage 2): each gradient
// is reduced to the one rank that owns its parameter under OSS, and the other ranks drop it, so
// that after backward every rank holds the gradients of its shard only (~1/N of them): all its
// optimizer step needs.
//
//   (autograd)           a parameter's gradient accumulator fires → the parameter is ready; its
//                        bucket, once complete and every earlier bucket launched, is launched:
//                        its reduce runs on the communicator's ring thread while backward goes on
//   finalize_backward()  launches what is left and waits; afterwards the owners' .grad hold the
//                        mean gradient, and every other rank's .grad is undefined
//
// Buckets: consecutive parameters in reverse registration order (the order backward produces
// gradients in) share a bucket up to `reduce_buffer_size` elements; a parameter of at least that
// many elements (or any, when it is 0) is a bucket of its own. A bucket's gradients are divided
// by the world size and copied into one flat buffer laid out by owner (rank 0's parameters,
// then rank 1's, ...), and one Communicator::reduce_scatter_chunks leaves each owner the sum of
// its chunk (Note [Ring reduce_scatter]): every rank sends what it does not own once, and all
// links are busy at once, where one reduce per owner (fairscale's) moves the same bytes one
// owner after the other. A non-owner drops a gradient as soon as it is in the buffer; a buffer
// is freed once its reduce completed and the owner copied its chunk out (checked whenever another
// gradient arrives, and at the end). A lone parameter's gradient is reduced without a copy (its
// own storage is the buffer). Buckets launch strictly in one order on every rank, so collectives
// match.
//
// no_sync (require_sync false): gradients accumulate locally, full size on every rank, and the
// next synchronized backward reduces the accumulated sums. A parameter that gets no gradient in a
// synchronized backward is an error (after completing the reduces, so that no peer hangs),
// unless it does not require grad when the backward starts (frozen: toggle_model() around a GAN's
// two backwards, fairscale's refreshed trainable set): it contributes zeros to its bucket and its
// gradient is left as it was, on every rank alike (the toggle is the same on every rank).
//
// Thread safety: hooks run on the autograd thread, everything else on the training thread; a
// mutex orders them. `communicator` must outlive the reducer.
#include <torch/torch.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "distributed/communicator.h"
#include "strategies/backward_reducer.h"
#include "strategies/buckets/bucket_assignment.h"
#include "strategies/buckets/readiness_tracker.h"

namespace torch::autograd {
struct Node;
}

namespace volt {

struct ShardedReducerOptions {
  // Elements of one bucket's reduce buffer (fairscale's reduce_buffer_size, default 2^23): smaller
  // parameters share one; 0: every gradient is reduced on its own. >= 0.
  int64_t reduce_buffer_size = int64_t{1} << 23;
  // Reduce in float16 (half the bytes; the owner decompresses into its float32 gradient).
  bool reduce_fp16 = false;
  void validate() const;
};

class ShardedReducer : public BackwardReducer {
 public:
  // `parameters` (dense, requiring grad) with their `names` (for messages) and the rank that owns
  // each (`owners`, in [0, world size)).
  ShardedReducer(std::vector<torch::Tensor> parameters, std::vector<std::string> names, std::vector<int64_t> owners,
                 Communicator& communicator, ShardedReducerOptions options);
  ~ShardedReducer();
  ShardedReducer(const ShardedReducer&) = delete;
  ShardedReducer& operator=(const ShardedReducer&) = delete;

  // Before a backward.
  void prepare_for_backward(const torch::Tensor& loss) override;
  // After it: see the top. Throws ConfigurationError for parameters that got no gradient;
  // rethrows errors raised in hooks. [collective]
  void finalize_backward() override;

  // Leaves .grad undefined for every parameter this rank does not own (as finalize_backward does).
  void drop_gradients_of_other_owners();

  // Bucket members (parameter indices) in reduce order, each bucket's members in its buffer's
  // order (grouped by owner, rank 0's first).
  std::vector<std::vector<size_t>> buckets() const;
  // The most bytes of reduce buffers (flat buffers, float16 copies, the owner's reduced chunk)
  // alive at once since construction, over the buckets in flight together: a live counter, for
  // the memory benchmark and tests.
  int64_t peak_buffer_bytes() const { return peak_buffer_bytes_; }

 private:
  struct Bucket {
    std::vector<size_t> members;  // in buffer order: grouped by owner
    std::vector<int64_t> counts;  // elements per rank (its chunk in the buffer)
    int64_t numel = 0;
    bool launched = false, done = false;
    torch::Tensor output;      // this rank's reduced chunk, once the reduce completed
    int64_t buffer_bytes = 0;  // of the buffers it allocated
    CollectiveHandle handle;
  };

  void on_gradient_ready(size_t index);  // the autograd hook
  void launch_ready();
  void launch(Bucket& bucket);  // [collective]
  // Finishes launched buckets whose reduce completed (all launched ones with `wait_all`).
  void finish_completed(bool wait_all);
  void finish(Bucket& bucket);
  void count_buffer(int64_t bytes);  // buffers of `bytes` are alive now (negative: freed)

  std::vector<torch::Tensor> parameters_;
  std::vector<std::string> names_;
  std::vector<int64_t> owners_;
  Communicator& communicator_;
  ShardedReducerOptions options_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<uintptr_t> hook_keys_;
  std::vector<Bucket> buckets_;
  buckets::ReadinessTracker tracker_;  // which gradients are ready; buckets launch in order
  std::vector<bool> frozen_;           // not requiring grad at this backward's start
  int64_t live_buffer_bytes_ = 0, peak_buffer_bytes_ = 0;

  std::mutex mutex_;
  bool in_backward_ = false;
  std::exception_ptr hook_error_;
};

}  // namespace volt

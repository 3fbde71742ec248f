#pragma once
// ShardedDDP's gradient reduction (fairscale's ShardedDataParallel; ZeRO stage 2): each gradient
// goes to the one rank that owns its parameter under OSS (a reduce, not an all-reduce), and the
// other ranks drop it, so that after backward every rank holds the gradients of its shard only
// (~1/N of them) — all its optimizer step needs.
//
//   (autograd)           a parameter's gradient accumulator fires → the parameter is ready; its
//                        bucket, once complete and every earlier bucket launched, is divided by
//                        the world size and reduced (sum) to its owner, asynchronously
//   finalize_backward()  launches what is left, waits, leaves the mean gradient in the owners'
//                        .grad, and every other rank's .grad undefined
//
// Buckets: a parameter of at least `reduce_buffer_size` elements (or any, when it is 0) is reduced
// on its own, in place in its .grad; smaller ones share a flat buffer with others of the same
// owner, up to `reduce_buffer_size` elements, so that small tensors do not cost a collective
// each. Buffers are allocated when a bucket launches and freed once its reduce completed; a
// non-owner drops a bucketed gradient as soon as it is copied into the buffer, and an unbucketed
// one as soon as its reduce completed (checked whenever another gradient arrives, and at the end).
// Buckets launch strictly in one order on every rank (reverse registration, the order backward
// produces gradients in), so collectives match across ranks.
//
// no_sync (require_sync false): gradients accumulate locally, full size on every rank, and the
// next synchronized backward reduces the accumulated sums. A parameter that gets no gradient in a
// synchronized backward is an error (after completing the reduces, so that no peer hangs).
//
// Thread safety: hooks run on the autograd thread, everything else on the training thread; a
// mutex orders them. `communicator` must outlive the reducer.
#include <torch/torch.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "distributed/communicator.h"

namespace torch::autograd {
struct Node;
}

namespace volt {

struct ShardedReducerOptions {
  // Elements of a shared reduce buffer (fairscale's reduce_buffer_size, default 2^23); 0: every
  // gradient is reduced on its own. >= 0.
  int64_t reduce_buffer_size = int64_t{1} << 23;
  // Reduce in float16 (half the bytes; the owner decompresses into its float32 gradient).
  bool reduce_fp16 = false;
  void validate() const;
};

class ShardedReducer {
 public:
  // `parameters` (dense, requiring grad) with their `names` (for messages) and the rank that owns
  // each (`owners`, in [0, world size)).
  ShardedReducer(std::vector<torch::Tensor> parameters, std::vector<std::string> names, std::vector<int64_t> owners,
                 Communicator& communicator, ShardedReducerOptions options);
  ~ShardedReducer();
  ShardedReducer(const ShardedReducer&) = delete;
  ShardedReducer& operator=(const ShardedReducer&) = delete;

  void set_require_sync(bool require_sync) { require_sync_ = require_sync; }
  bool require_sync() const { return require_sync_; }
  // Before a backward.
  void prepare_for_backward();
  // After it: see the top. Throws ConfigurationError for parameters that got no gradient;
  // rethrows errors raised in hooks. [collective]
  void finalize_backward();

  // Leaves .grad undefined for every parameter this rank does not own (as finalize_backward does).
  void drop_gradients_of_other_owners();

  // Bucket members (parameter indices), in launch order, and each bucket's owner.
  std::vector<std::vector<size_t>> buckets() const;
  std::vector<int64_t> bucket_owners() const;
  // The most bytes of reduce buffers (shared buffers, float16 copies) alive at once since
  // construction: a live counter, for the memory benchmark and tests.
  int64_t peak_buffer_bytes() const { return peak_buffer_bytes_; }

 private:
  struct Bucket {
    std::vector<size_t> members;
    int64_t owner = 0;
    int64_t numel = 0;
    bool shared = false;  // a flat buffer (else the one member's .grad itself)
    size_t ready = 0;
    bool launched = false, done = false;
    torch::Tensor buffer;  // what travels (the buffer, or the gradient / its float16 copy)
    int64_t buffer_bytes = 0;  // of `buffer` when it is an allocation of its own
    CollectiveHandle handle;
  };

  void on_gradient_ready(size_t index);  // the autograd hook
  void launch_ready();
  void launch(Bucket& bucket);
  // Finishes launched buckets whose reduce completed (all launched ones with `wait_all`).
  void finish_completed(bool wait_all);
  void finish(Bucket& bucket);

  std::vector<torch::Tensor> parameters_;
  std::vector<std::string> names_;
  std::vector<int64_t> owners_;
  Communicator& communicator_;
  ShardedReducerOptions options_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<uintptr_t> hook_keys_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;
  std::vector<bool> ready_;
  size_t next_launch_ = 0;
  int64_t live_buffer_bytes_ = 0, peak_buffer_bytes_ = 0;

  std::mutex mutex_;
  bool require_sync_ = true;
  bool in_backward_ = false;
  std::exception_ptr hook_error_;
};

}  // namespace volt

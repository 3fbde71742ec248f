#pragma once
// Low-precision wrappers (PyTorch's fp16_compress_wrapper / bf16_compress_wrapper), and the hook
// that does nothing.
//
// A CompressionWrapper casts the bucket to float16 or bfloat16, runs the hook it wraps on the
// cast bucket (so every collective it issues carries 2-byte elements), and casts the result back.
// `comm_hook=fp16_compress` is the wrapper around `allreduce`: cast, divide by the world size in
// float16 (before the sum, so that it cannot overflow), all-reduce, decompress into the bucket —
// PyTorch's fp16_compress_hook step for step. bfloat16 all-reduces run natively in bfloat16 over
// Gloo here (Note [bfloat16 over Gloo]); PyTorch 1.13 has bf16 compression on NCCL only.
#include <memory>

#include "strategies/ddp/comm_hook.h"

namespace volt::ddp {

class CompressionWrapper : public CommHook {
 public:
  // `dtype`: torch::kHalf or torch::kBFloat16. Throws ConfigurationError for another dtype or a
  // null `inner`.
  CompressionWrapper(torch::Dtype dtype, std::unique_ptr<CommHook> inner);
  // "fp16_compress_wrapper(<inner>)" or "bf16_compress_wrapper(<inner>)".
  std::string name() const override;
  CollectiveHandle run(GradBucket& bucket) override;
  StateDict state_dict() const override { return inner_->state_dict(); }
  void load_state_dict(const StateDict& state) override { inner_->load_state_dict(state); }
  void on_buckets_rebuilt(const BucketLayout& layout) override { inner_->on_buckets_rebuilt(layout); }

 private:
  torch::Dtype dtype_;
  std::unique_ptr<CommHook> inner_;
};

// Communicates nothing: every rank keeps its own gradients (PyTorch's noop hook, for measuring
// what communication costs). Training with it is not data parallel.
class NoOpHook : public CommHook {
 public:
  std::string name() const override { return "noop"; }
  CollectiveHandle run(GradBucket& bucket) override { return {}; }
};

}  // namespace volt::ddp

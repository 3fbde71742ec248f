#pragma once
// PowerSGD gradient compression (Vogels, Karimireddy, Jaggi, "PowerSGD: Practical Low-Rank
// Gradient Compression for Distributed Optimization", NeurIPS 2019), with the semantics of
// PyTorch's powerSGD_hook / batched_powerSGD_hook (torch/distributed/algorithms/ddp_comm_hooks/
// powerSGD_hook.py): `ddp:comm_hook=powersgd` / `batched_powersgd`.
//
// Until `start_powersgd_iter` synchronized iterations have passed, a bucket is all-reduced as is.
// From then on, per bucket: the stored error is added (error feedback); each gradient matrix M
// worth compressing (low_rank.h) is approximated as P·Qᵀ with P = M·Q, all-reduce P, orthogonalize
// P, Q = Mᵀ·P, all-reduce Q (then divided by the world size), M ≈ P·Qᵀ; vectors and matrices not
// worth it are all-reduced uncompressed in one flat buffer; the new error is what compression
// lost. Q starts random, the same on every rank (numpy_random_state.h); with warm start it is kept
// between iterations. The three collectives of a bucket are a chain (then_collective): the first
// starts during backward, the others when the Reducer waits for the bucket.
//
// Thread safety: run() is called on the autograd thread, the continuations and everything else on
// the training thread, never at once (comm_hook.h).
#include <map>
#include <memory>
#include <vector>

#include "core/option_schema.h"
#include "strategies/ddp/comm_hook.h"
#include "strategies/ddp/hooks/numpy_random_state.h"

namespace volt::ddp {

struct PowerSGDOptions {
  int64_t matrix_approximation_rank = 1;  // r: rank of the approximation, >= 1
  int64_t start_powersgd_iter = 1000;     // synchronized iterations of plain all-reduce first
  double min_compression_rate = 2;        // compress an n×m matrix only if (n+m)·r·rate < n·m
  bool use_error_feedback = true;         // add what compression lost to the next gradient
  bool warm_start = true;                 // keep Q between iterations (else a new random Q each time)
  double orthogonalization_epsilon = 0;   // added to column norms when orthogonalizing, >= 0
  int64_t random_seed = 0;                // seeds the generator of the initial Q, in [0, 2^32)
  bool batch_tensors_with_same_shape = false;  // compress same-shaped gradients in one batched product

  static const OptionSchema<PowerSGDOptions>& schema();
  // The keys batched PowerSGD uses: not min_compression_rate nor batch_tensors_with_same_shape
  // (the whole bucket is one matrix), which it therefore does not accept.
  static const OptionSchema<PowerSGDOptions>& batched_schema();
  // Error feedback and warm start keep per-bucket state, which the bucket rebuild after the first
  // synchronized iteration would invalidate: they need start_powersgd_iter > 1 (PyTorch's rule).
  void validate() const;
};

// What the two variants share: the schedule, the per-bucket memories and their checkpoint.
class PowerSGDHookBase : public CommHook {
 public:
  PowerSGDHookBase(Communicator& communicator, PowerSGDOptions options);

  CollectiveHandle run(GradBucket& bucket) final;
  // {"iteration", "rng", "bucket_numel", "error"/"p"/"q": {bucket index: tensor}}.
  StateDict state_dict() const override;
  // Restores the iteration and the generator; the per-bucket memories only when they were saved
  // for the same buckets (else they restart, with a warning on stderr).
  void load_state_dict(const StateDict& state) override;
  // Memories belong to the old buckets: they are dropped.
  void on_buckets_rebuilt(const BucketLayout& layout) override;

  int64_t iteration() const { return iteration_; }

 protected:
  // Compresses `bucket` (input already holds the error feedback) and returns the chain of its
  // collectives, whose result is the averaged flat gradient.
  virtual CollectiveHandle compress(GradBucket& bucket) = 0;
  // Adds the stored error to `input` and returns a copy of the sum (whose difference from the
  // decompressed result becomes the next error); undefined without error feedback.
  torch::Tensor add_error_feedback(int64_t bucket, torch::Tensor& input);
  // Stores the error of `bucket` after decompression and drops P/Q without warm start.
  void finish(int64_t bucket, const torch::Tensor& input_with_error, const torch::Tensor& decompressed);

  Communicator& communicator_;
  PowerSGDOptions options_;
  NumpyRandomState rng_;
  std::map<int64_t, torch::Tensor> error_, p_memory_, q_memory_;

 private:
  int64_t iteration_ = 0;
  std::vector<int64_t> bucket_numel_;  // the layout the memories belong to
};

// powerSGD_hook: each gradient of the bucket compressed on its own (or batched by shape).
class PowerSGDHook : public PowerSGDHookBase {
 public:
  using PowerSGDHookBase::PowerSGDHookBase;
  std::string name() const override { return "powersgd"; }

 protected:
  CollectiveHandle compress(GradBucket& bucket) override;
};

// batched_powerSGD_hook: the whole bucket as one square matrix, zero-padded.
class BatchedPowerSGDHook : public PowerSGDHookBase {
 public:
  using PowerSGDHookBase::PowerSGDHookBase;
  std::string name() const override { return "batched_powersgd"; }

 protected:
  CollectiveHandle compress(GradBucket& bucket) override;
};

}  // namespace volt::ddp

#pragma once
// Which gradients share a bucket, for DDP's reducer and ShardedDDP's. A bucket is one flat buffer
// reduced by one collective, so its members must share dtype and device; its size trades latency (many small
// collectives) against overlap (one huge collective can only start when backward is nearly done).
#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace volt::buckets {

struct BucketLimits {
  // Cap of the first bucket filled for each (dtype, device), in bytes: small, so that the first
  // reduction starts early in backward (PyTorch's 1 MiB).
  int64_t first_bucket_bytes = int64_t{1} << 20;
  // Cap of every later bucket, in bytes (bucket_cap_mb · 2^20; PyTorch's default 25 MiB).
  int64_t bucket_bytes = int64_t{25} << 20;
};

// Note [Bucket order]
// Buckets are filled walking `order` (indices into `parameters`): reverse registration order at
// first, because backward produces gradients roughly from the last layer to the first; after the
// first iteration, the order in which gradients actually became ready (rank 0's, so that every
// rank builds identical buckets). Each (dtype, device) pair fills its own open bucket; a bucket
// closes once it reaches its cap (so one parameter larger than the cap gets a bucket of its own).
// Buckets are numbered by the position of their first member in `order`, which is the order in
// which they become ready and are reduced.
//
// Returns the buckets as lists of parameter indices, in that order. Every index of `order` lands
// in exactly one bucket. Throws ConfigurationError for an index out of range or repeated, or an
// undefined or sparse parameter.
std::vector<std::vector<size_t>> assign_buckets(const std::vector<torch::Tensor>& parameters,
                                                const std::vector<size_t>& order, const BucketLimits& limits);

// fairscale's ShardedDDP rule: walking the parameters in reverse registration order, consecutive
// ones of one dtype and device share a bucket while their elements together stay within
// `max_numel`; a parameter with at least `max_numel` elements (or every one, when `max_numel` is
// 0) gets a bucket of its own. Returns the buckets as lists of parameter indices, in that order.
std::vector<std::vector<size_t>> assign_consecutive_buckets(const std::vector<torch::Tensor>& parameters,
                                                            int64_t max_numel);

// 0, 1, ..., n-1 reversed: the initial order of Note [Bucket order].
std::vector<size_t> reverse_registration_order(size_t n);

}  // namespace volt::buckets

#pragma once
// One FSDP unit's parameters as one flat tensor sharded over the ranks (ZeRO stage 3; fairscale's
// FlatParameter). Each rank keeps shard_: its 1/N slice of the flattened parameters (padded to a
// multiple of N), in their own dtype (float32: the master weights), a leaf that requires grad;
// the optimizer steps these shards. The module's parameters are views into full_, the gathered
// flat tensor in the compute dtype (float32, or bfloat16/float16 with mixed precision), which
// exists only between gather() and release().
//
// Note [Freeing gathered parameters]: release() frees full_'s storage in place (its bytes go back
// to the allocator; the StorageImpl stays), and the parameters become empty tensors; gather()
// refills that same storage and points the parameters at it again. Autograd may have saved views
// of a parameter during forward (Linear saves weight.t()); those views share full_'s storage, so
// they see the gathered values again in backward, and the memory is really free in between.
// The parameters keep their TensorImpl (set_data), so module members, optimizers' references and
// the gradient accumulators stay valid; a released parameter reads as an empty tensor, never as
// freed memory.
//
// Note [Prefetching a unit]: prefetch() starts the all-gather asynchronously into full_'s
// refilled storage and returns; the collective (the backend's own all_gather_into, whichever
// thread volt's rings run on) runs on the process group's worker thread while this thread
// computes another unit. gather() then only waits for it. A gather that is not ahead blocks
// anyway and takes volt's in-place ring instead (no staging copy). Nothing reads the storage
// before that wait (the parameters still point at empty tensors until gather() points them at
// it), and release() waits before it frees the storage the collective writes into.
//
// Note [Resharding to a group]: fsdp:reshard_after_forward=G (FSDP2's int, ZeRO++'s hpZ).
// release_to_group() frees the gathered parameters but keeps this rank's 1/G of them, G being the
// size of its group of consecutive ranks (a node): the group together holds the unit whole, so
// the next gather (the backward's) all-gathers within the group from those parts, not over every
// rank from the shards. The part is a slice of what the all-gather fills: the flat tensor, or per
// parameter the blocks (rebuilt from the parameters for it). It is counted in GatheredBytes while
// kept, and dropped once a gather used it, or by release().
//
// Note [CPU offload]: with offload_to_host the shard (and so its gradient and the optimizer state
// the optimizer makes for it) lives in pinned host memory while the parameters compute on a CUDA
// device (PyTorch's CPUOffload(offload_params=True), fairscale's move_params_to_cpu): a gather
// copies the shard to the device, cast to the compute dtype, and all-gathers there; the reduced
// gradient comes back to the host, where the optimizer steps. The device holds gathered units,
// their gradients until they are reduced, and activations. The collectives of checkpoints and
// clipping on host tensors are staged through the device (Note [CPU tensors on a device's backend]).
//
// The per-parameter layout (fsdp:layout=per_parameter, Note [Per-parameter layout] in
// parameter_chunks.h) keeps the same lifecycle: shard_ is then this rank's block (its chunk of
// each parameter), each entry's `shard` a leaf viewing its chunk (what the optimizer steps),
// full_ the parameters unsharded in their own order (gather() copies the all-gathered blocks
// into it; the blocks live only until then), and frozen parameters are entries too, with no
// gradient. Its parameters may differ in dtype: shard_, the blocks and full_ are then bytes, each
// parameter a view of its own dtype into them; the flat layout needs one dtype.
//
// Not thread-safe; every [collective] method must be called by every rank in the same order.
#include <torch/torch.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distributed/communicator.h"
#include "strategies/fsdp/parameter_chunks.h"
#include "strategies/fsdp/shard_layout.h"

namespace volt::fsdp {

// Bytes of gathered parameters alive at once, over every FlatParameter that shares it (a
// strategy's units): counted at each gather and release, so that memory is measured, not
// estimated.
struct GatheredBytes {
  int64_t now = 0;
  int64_t peak = 0;  // the most alive at once since the last reset_peak()
  int64_t prefetches = 0;  // gathers started by prefetch() (counted when they start)
  void add(int64_t bytes) { peak = std::max(peak, now += bytes); }
  void remove(int64_t bytes) { now -= bytes; }
  void reset_peak() { peak = now; }
};

class FlatParameter {
 public:
  struct Entry {
    std::string name;          // the parameter's name in the root module
    torch::Tensor parameter;   // the module's parameter (its data becomes a view into full_)
    int64_t offset = 0;        // where it starts in full_ (the parameters one after another; bytes if mixed)
    std::vector<int64_t> shape;
    bool trainable = true;     // requires grad (always, in the flat layout)
    torch::Dtype dtype = torch::kFloat;          // its own: the shard's, what the optimizer steps
    torch::Dtype compute_dtype = torch::kFloat;  // gathered and computed in (mixed precision's, or its own)
    // The per-parameter layout: its chunk's place, and the leaf the optimizer steps for it (this
    // rank's rows, a view into shard_; requires grad when the parameter does).
    ParameterChunk chunk;
    torch::Tensor shard;
    int64_t numel() const;
  };
  // A piece of this rank's shard: elements [begin, begin + count) of entry `entry` (in its own
  // row-major order), at `position` in the shard. The rest of the shard is padding.
  struct Piece {
    size_t entry = 0;
    int64_t begin = 0, count = 0, position = 0;
  };

  // Flattens `parameters` (same device; in the flat layout of one dtype and each requiring grad;
  // may be empty) and keeps this rank's shard among the ranks of `communicator` (the group it is
  // sharded over), cut as `layout` says; the parameters are left gathered (views of full_, in
  // their compute dtype). `cast_dtype`: mixed precision's dtype, which floating-point parameters
  // are gathered and computed in (none: each in its own). `gathered`: where its gathers and releases are
  // counted (none: null). `gradient_world`: the number of ranks whose gradients are averaged into
  // the shard's (0: the communicator's size; more where the gradients are also all-reduced over
  // replicas of the shard, Note [NO_SHARD] in fsdp_strategy.h). `offload_to_host`: keep the shard
  // in host memory while the parameters are on a CUDA device (Note [CPU offload]).
  FlatParameter(std::vector<std::pair<std::string, torch::Tensor>> parameters, Communicator& communicator,
                std::optional<torch::Dtype> cast_dtype, std::shared_ptr<GatheredBytes> gathered = nullptr,
                int64_t gradient_world = 0, bool offload_to_host = false,
                ShardLayout layout = ShardLayout::Flat);
  // Waits for a prefetch still in flight (its collective writes into full_'s storage).
  ~FlatParameter();
  FlatParameter(const FlatParameter&) = delete;
  FlatParameter& operator=(const FlatParameter&) = delete;

  const std::vector<Entry>& entries() const { return entries_; }
  bool empty() const { return entries_.empty(); }
  ShardLayout layout() const { return layout_; }
  int64_t numel() const { return numel_; }                 // without padding
  int64_t padded_numel() const { return shard_numel_ * world_; }
  int64_t shard_numel() const { return shard_numel_; }
  // The elements of a flat gradient (write_flat_gradient's rows): every rank's shard, or, per
  // parameter, every rank's trainable prefix of its block.
  int64_t gradient_numel() const { return gradient_shard_numel_ * world_; }
  // Where this rank's slice starts in the padded flat tensor (the flat layout).
  int64_t shard_offset() const { return rank_ * shard_numel_; }
  // This rank's place among the ranks the unit is sharded over.
  int64_t shard_rank() const { return rank_; }
  // This rank's slice, [rank·shard_numel, (rank+1)·shard_numel) of the padded flat tensor; per
  // parameter, its block (which the entries' shards view).
  torch::Tensor& shard() { return shard_; }
  const torch::Tensor& shard() const { return shard_; }
  // Where this rank's shard comes from (Piece), in shard order.
  std::vector<Piece> pieces() const;

  // What the optimizer steps for entry `entry`: the flat shard (every entry's), or per parameter
  // the entry's own shard.
  const torch::Tensor& stepped(size_t entry) const;
  // Every tensor the optimizer may step for this unit (the flat shard, or each entry's shard).
  std::vector<torch::Tensor> stepped_tensors() const;
  // How many entries stepped(entry) stands for, its elements, and where `entry` starts among the
  // values gather_stepped_to returns.
  size_t stepped_entry_count() const { return layout_ == ShardLayout::Flat ? entries_.size() : 1; }
  int64_t stepped_numel(size_t entry) const;
  int64_t stepped_offset(size_t entry) const;
  // Every rank's `stepped_like` (stepped_numel(entry) elements: e.g. an optimizer state tensor of
  // stepped(entry)) put together on `root` (undefined elsewhere), without padding: the values of
  // the entries stepped(entry) stands for, one after another. [collective]
  torch::Tensor gather_stepped_to(size_t entry, const torch::Tensor& stepped_like, int64_t root) const;
  // Bytes of the unit gathered: every rank's shard in the compute dtypes, padding included.
  int64_t unsharded_bytes() const;
  // Where the parameters are gathered and compute (the shard's device unless offloaded).
  const torch::Device& compute_device() const { return compute_device_; }

  bool gathered() const { return gathered_; }
  // Whether a prefetch() is in flight (gather() completes it).
  bool prefetching() const { return pending_.has_value(); }
  // All-gathers the shards (cast to the compute dtype) into full_ and points the parameters at
  // it; completes a prefetch in flight instead. [collective, unless completing a prefetch]
  void gather();
  // Starts gather()'s all-gather without waiting for it (Note [Prefetching a unit]); nothing when
  // gathered or in flight already. [collective]
  void prefetch();
  // Frees full_'s storage (waiting for a prefetch in flight first); the parameters become empty
  // (Note [Freeing gathered parameters]).
  void release();
  // Frees the gathered parameters but keeps this rank's part of them within `group` (its
  // consecutive ranks, a divisor of the shard group's), which the next gather all-gathers from
  // (Note [Resharding to a group]).
  void release_to_group(Communicator& group);
  // Bytes full_ holds now (0 when released).
  int64_t gathered_bytes() const;
  // Bytes of the gradients the shards hold now.
  int64_t shard_gradient_bytes() const;

  // The first half of reducing the gradients: the parameters' gradients flattened (zeros where a
  // parameter has none, and in the padding) into `rows` ([world, gradient_numel() / world] of the
  // reduce dtype, row r = rank r's part of the flat gradient; any strides, e.g. a bucket's columns),
  // divided by `pre_divide`; the parameters' gradients are dropped (the full-size gradient is
  // freed here). To be reduce-scattered (summed over the ranks) into accumulate_reduced.
  void write_flat_gradient(torch::Tensor rows, double pre_divide);
  // The second half: this rank's reduce-scattered gradient_numel() / world elements, divided by
  // gradient_world / pre_divide in their dtype (so that the two divisions make the mean: PyTorch's split,
  // which keeps a float16 sum from overflowing), converted to the shard's dtype and added to its
  // gradient (or become it).
  void accumulate_reduced(const torch::Tensor& reduced, double pre_divide);

  // Gives the parameters back whole: tensors of their own (the shards' dtype) holding the
  // unsharded values; the flat parameter is not used after it. [collective]
  void restore_parameters();

  // The unsharded parameters, a tensor each in its own shape and dtype (the shards'). [collective]
  std::vector<torch::Tensor> full_parameters() const;
  // The same on `root` alone (empty elsewhere): no other rank holds the unit whole, even for a
  // moment (a full checkpoint's save, Note [A full save gathers to rank 0]). [collective]
  std::vector<torch::Tensor> parameters_gathered_to(int64_t root) const;
  // The flat layout: every rank's `shard_like` (shard_numel() elements: e.g. an optimizer state
  // tensor of the flat shard), concatenated without the padding (numel() elements), on `root`
  // alone (undefined elsewhere). [collective]
  torch::Tensor gather_shards_to(const torch::Tensor& shard_like, int64_t root) const;

 private:
  void build_flat(const std::vector<torch::Tensor>& flat_pieces, bool offload_to_host);
  void build_per_parameter(const std::vector<torch::Tensor>& flat_pieces, bool offload_to_host);
  void point_parameters_at(const torch::Tensor& flat);
  // Per parameter: the all-gathered blocks ([world · gathered block]) copied out into full_.
  void copy_blocks_out(const torch::Tensor& blocks) const;
  // This rank's shard as its part of what the all-gather fills (cast to the compute dtypes, on
  // the compute device), written into `row`.
  void write_gathered_block(const torch::Tensor& row) const;
  // Every rank's shard as all-gathered (`gathered`: [world · shard_numel], this rank's or another's)
  // as the parameters, a tensor each.
  std::vector<torch::Tensor> split_parameters(const torch::Tensor& gathered) const;
  // Refills full_'s storage and starts the all-gather into it (counted as gathered from now):
  // `ahead` (a prefetch) on the backend's worker thread, else volt's ring, in place.
  CollectiveHandle start_gather(bool ahead);
  void finish_prefetch();  // waits for it, then points the parameters at full_
  void free_gathered();    // full_'s storage, the parameters empty
  void drop_group_part();

  Communicator& communicator_;
  int64_t rank_, world_;
  int64_t gradient_world_;  // ranks whose gradients are averaged (world_, or more with replicas)
  torch::Device compute_device_ = torch::kCPU;
  ShardLayout layout_;
  std::vector<Entry> entries_;
  int64_t numel_ = 0, shard_numel_ = 0, gradient_shard_numel_ = 0;
  int64_t gathered_block_numel_ = 0;  // a rank's part of what the all-gather fills
  // The shard is what the all-gather sends as it is, but for a cast (no per-parameter copy).
  bool shard_is_gathered_block_ = true;
  torch::Tensor shard_;
  // In the compute dtype, its storage freed while released: the flat layout's padded flat tensor,
  // or per parameter the parameters one after another (each at its entry's offset; bytes where
  // their compute dtypes differ).
  torch::Tensor full_;
  torch::Tensor blocks_;  // per parameter: what the all-gather fills, alive until copied out
  torch::Tensor group_part_;         // Note [Resharding to a group]: this rank's part, while kept
  Communicator* group_ = nullptr;    // the group it is gathered over
  bool gathered_ = false;
  std::optional<CollectiveHandle> pending_;  // a prefetch in flight
  torch::Tensor pending_source_;             // what a prefetch sends, alive until it completes
  std::shared_ptr<GatheredBytes> gathered_bytes_;
};

// PyTorch FSDP's split of the average over `world` ranks: gradients are divided by this factor
// before the sum and by world / factor after it, so that a float16 sum neither overflows nor
// underflows. Starting at 1, the factor doubles while world is divisible by it and world / factor
// exceeds it (2 ranks: 2, then 1; 3: 2, then 1.5; 8: 4, then 2).
double gradient_pre_divide_factor(int64_t world);

}  // namespace volt::fsdp

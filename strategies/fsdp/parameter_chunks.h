#pragma once
// Note [Per-parameter layout]
// fsdp:layout=per_parameter (FSDP2's fully_shard) shards every parameter of a unit on its first
// dimension: rank r keeps rows [r·c, (r+1)·c) of it, c = ceil(rows / N), the rows past the end
// zero (padding). A rank's shard of the unit is its chunk of each parameter, one after another
// (its "block", the same size on every rank), so that the unit still gathers in one all-gather
// and reduce-scatters in one:
//
//   block of rank r = [ chunk r of p0 | chunk r of p1 | ... | chunk r of frozen q0 | ... ]
//   gathered        = [ block 0 | block 1 | ... | block N-1 ]           (all-gather)
//
// A parameter's rows are spread over the blocks, so the gathered buffer is copied out into the
// parameters (one strided copy for the ranks whose chunk is full, one for the rank with the
// last rows), and a gradient copied into the blocks before its reduce-scatter, which the flat
// layout (flat_parameter.h) does anyway. The parameters that require grad come first in every
// block, so that the gradient is a prefix of each block: frozen parameters are sharded (and
// gathered) like the others, but their chunks are neither reduced nor hold a gradient.
//
// Mixed dtypes (a bfloat16 frozen base under float32 adapters): a block whose chunks have one
// dtype is a tensor of it, offsets counted in elements; where they differ it is a tensor of
// bytes, offsets counted in bytes, each chunk starting at a multiple of kChunkAlignment so that
// it can be viewed as its own dtype (typed_span). The all-gather then moves bytes, still one
// collective (FSDP2 does the same). A unit has three blocks, each placed on its own: the shard
// (the parameters' own dtypes), the gathered one (the dtypes they compute in: mixed precision
// casts floating parameters to one) and the gradient (the trainable chunks only, in the one
// reduce dtype, so that a reduce-scatter sums numbers, not bytes).
//
// What this buys: each chunk is a tensor of the parameter's own shape but for its first
// dimension ([c, ...]), so the optimizer steps one shard per parameter, under the parameter's
// place in its param group (per-parameter optimizer state, any param groups, no flat index), and
// frozen parameters shrink with the world size. This file is only the geometry: which elements
// go where.
#include <torch/torch.h>

#include <vector>

namespace volt::fsdp {

// Where a chunk starts in a block of bytes (a multiple of any dtype's size).
constexpr int64_t kChunkAlignment = 16;

// One parameter's place in the per-parameter layout.
struct ParameterChunk {
  int64_t rows = 1;       // the parameter's first dimension (1 for a 0-d parameter)
  int64_t row_numel = 1;  // elements in one row (the product of the other dimensions)
  int64_t chunk_rows = 0;  // rows per rank: ceil(rows / world)
  // Where its chunk starts in every rank's shard block, gathered block and gradient block (in
  // each block's units: elements of its dtype, or bytes; the gradient's only for a trainable one).
  int64_t offset = 0;
  int64_t gathered_offset = 0;
  int64_t gradient_offset = 0;
  int64_t chunk_numel() const { return chunk_rows * row_numel; }
  // The parameter's elements (in its own row-major order) that `rank`'s chunk holds: those from
  // `begin`, `count` of them (0 for a rank past the last rows); the chunk's rest is padding.
  int64_t begin(int64_t rank) const;
  int64_t count(int64_t rank) const;
  // The shape of a rank's chunk: the parameter's, with chunk_rows rows.
  std::vector<int64_t> chunk_shape(const std::vector<int64_t>& shape) const;
};

// Items of `numels[i]` elements of `dtypes[i]` (empty: float32 for all) placed one after another
// in a block, those with `first[i]` before the others: offsets in elements of the dtypes' one
// dtype, or where they differ in bytes, each item at a multiple of kChunkAlignment.
struct BlockPlacement {
  std::vector<int64_t> offsets;
  int64_t numel = 0;        // the block's size (a multiple of kChunkAlignment in bytes)
  int64_t first_numel = 0;  // where the items after the first ones begin
  torch::Dtype dtype = torch::kFloat;  // the one dtype, or kByte
};
BlockPlacement place_in_block(const std::vector<int64_t>& numels, const std::vector<bool>& first,
                              const std::vector<torch::Dtype>& dtypes);

// The chunks of parameters of `shapes` over `world` ranks; `trainable[i]`: parameter i requires
// grad (placed first in the blocks). `dtypes` / `gathered_dtypes`: each parameter's dtype in the
// shard block / the gathered block (empty: float32 for all).
struct ChunkLayout {
  std::vector<ParameterChunk> chunks;
  int64_t block_numel = 0;     // the shard block's size, in units of block_dtype
  torch::Dtype block_dtype = torch::kFloat;  // the parameters' one dtype, or kByte where they differ
  int64_t gathered_numel = 0;  // the same for the gathered block
  torch::Dtype gathered_dtype = torch::kFloat;
  int64_t gradient_numel = 0;  // the gradient block: the trainable chunks' elements
};
ChunkLayout layout_chunks(const std::vector<std::vector<int64_t>>& shapes, const std::vector<bool>& trainable,
                          int64_t world, const std::vector<torch::Dtype>& dtypes = {},
                          const std::vector<torch::Dtype>& gathered_dtypes = {});

// `numel` elements of `dtype` at `offset` of the last dimension of `block` (a block of `dtype`,
// or of bytes: the offset then in bytes), as a view of that dtype.
torch::Tensor typed_span(const torch::Tensor& block, int64_t offset, int64_t numel, torch::Dtype dtype);

// Copies a parameter's chunks out of `columns` ([world, chunk_numel]: each rank's chunk of it, any
// strides) into `parameter` (contiguous, the parameter's numel, any shape).
void copy_chunks_out(const torch::Tensor& columns, const ParameterChunk& chunk, const torch::Tensor& parameter);

// Copies `gradient` (the parameter's numel, contiguous; undefined: zeros) into its `columns`
// ([world, chunk_numel] of the reduce dtype), the padding rows zero, divided by `pre_divide` (in
// the gradient's dtype when it is the columns', else after the conversion, as PyTorch does).
void copy_chunks_in(const torch::Tensor& gradient, const ParameterChunk& chunk, const torch::Tensor& columns,
                    double pre_divide);

}  // namespace volt::fsdp

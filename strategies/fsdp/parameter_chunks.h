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
// What this buys: each chunk is a tensor of the parameter's own shape but for its first
// dimension ([c, ...]), so the optimizer steps one shard per parameter, under the parameter's
// place in its param group (per-parameter optimizer state, any param groups, no flat index), and
// frozen parameters shrink with the world size. This file is only the geometry: which elements
// go where.
#include <torch/torch.h>

#include <vector>

namespace volt::fsdp {

// One parameter's place in the per-parameter layout.
struct ParameterChunk {
  int64_t rows = 1;       // the parameter's first dimension (1 for a 0-d parameter)
  int64_t row_numel = 1;  // elements in one row (the product of the other dimensions)
  int64_t chunk_rows = 0;  // rows per rank: ceil(rows / world)
  int64_t offset = 0;      // where its chunk starts in every rank's block
  int64_t chunk_numel() const { return chunk_rows * row_numel; }
  // The parameter's elements (in its own row-major order) that `rank`'s chunk holds: those from
  // `begin`, `count` of them (0 for a rank past the last rows); the chunk's rest is padding.
  int64_t begin(int64_t rank) const;
  int64_t count(int64_t rank) const;
  // The shape of a rank's chunk: the parameter's, with chunk_rows rows.
  std::vector<int64_t> chunk_shape(const std::vector<int64_t>& shape) const;
};

// The chunks of parameters of `shapes` over `world` ranks; `trainable[i]`: parameter i requires
// grad (placed first in the block). `block_numel`: the block's size; `gradient_numel`: its prefix
// that the trainable chunks fill.
struct ChunkLayout {
  std::vector<ParameterChunk> chunks;
  int64_t block_numel = 0;
  int64_t gradient_numel = 0;
};
ChunkLayout layout_chunks(const std::vector<std::vector<int64_t>>& shapes, const std::vector<bool>& trainable,
                          int64_t world);

// Copies parameter `chunk`'s elements out of `blocks` ([world, block size], any strides) into
// `parameter` (contiguous, the parameter's numel, any shape).
void copy_chunks_out(const torch::Tensor& blocks, const ParameterChunk& chunk, const torch::Tensor& parameter);

// Copies `gradient` (the parameter's numel, contiguous; undefined: zeros) into its chunks of
// `blocks` ([world, block size] of the reduce dtype), the padding rows zero, divided by
// `pre_divide` (in the gradient's dtype when it is the blocks', else after the conversion, as
// PyTorch does).
void copy_chunks_in(const torch::Tensor& gradient, const ParameterChunk& chunk, const torch::Tensor& blocks,
                    double pre_divide);

}  // namespace volt::fsdp

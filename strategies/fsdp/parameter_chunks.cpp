#include "strategies/fsdp/parameter_chunks.h"

#include <algorithm>
#include <numeric>

namespace volt::fsdp {

int64_t ParameterChunk::begin(int64_t rank) const { return std::min(rows, rank * chunk_rows) * row_numel; }

int64_t ParameterChunk::count(int64_t rank) const {
  return std::clamp(rows - rank * chunk_rows, int64_t{0}, chunk_rows) * row_numel;
}

std::vector<int64_t> ParameterChunk::chunk_shape(const std::vector<int64_t>& shape) const {
  if (shape.empty()) return {chunk_rows};  // a 0-d parameter is one row of one element
  auto out = shape;
  out[0] = chunk_rows;
  return out;
}

ChunkLayout layout_chunks(const std::vector<std::vector<int64_t>>& shapes, const std::vector<bool>& trainable,
                          int64_t world) {
  ChunkLayout layout;
  layout.chunks.resize(shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    auto& chunk = layout.chunks[i];
    const auto& shape = shapes[i];
    chunk.rows = shape.empty() ? 1 : shape[0];
    chunk.row_numel = shape.size() <= 1 ? 1
                                        : std::accumulate(shape.begin() + 1, shape.end(), int64_t{1},
                                                          std::multiplies<>());
    chunk.chunk_rows = (chunk.rows + world - 1) / world;
  }
  // Trainable chunks first: the gradient is the block's prefix.
  for (const bool pass_trainable : {true, false}) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      if (trainable[i] != pass_trainable) continue;
      layout.chunks[i].offset = layout.block_numel;
      layout.block_numel += layout.chunks[i].chunk_numel();
    }
    if (pass_trainable) layout.gradient_numel = layout.block_numel;
  }
  return layout;
}

namespace {

// The ranks whose chunk of `chunk` is full, and the elements of the one after them (the last
// rows; 0 when they divide evenly).
std::pair<int64_t, int64_t> full_ranks_and_rest(const ParameterChunk& chunk) {
  if (chunk.chunk_rows == 0) return {0, 0};
  const int64_t full = chunk.rows / chunk.chunk_rows;
  return {full, (chunk.rows - full * chunk.chunk_rows) * chunk.row_numel};
}

}  // namespace

void copy_chunks_out(const torch::Tensor& blocks, const ParameterChunk& chunk, const torch::Tensor& parameter) {
  const auto [full, rest] = full_ranks_and_rest(chunk);
  const int64_t n = chunk.chunk_numel();
  auto out = parameter.view({-1});
  if (full > 0) out.narrow(0, 0, full * n).view({full, n}).copy_(blocks.narrow(0, 0, full).narrow(1, chunk.offset, n));
  if (rest > 0) out.narrow(0, full * n, rest).copy_(blocks[full].narrow(0, chunk.offset, rest));
}

void copy_chunks_in(const torch::Tensor& gradient, const ParameterChunk& chunk, const torch::Tensor& blocks,
                    double pre_divide) {
  const auto [full, rest] = full_ranks_and_rest(chunk);
  const int64_t n = chunk.chunk_numel(), world = blocks.size(0);
  auto columns = blocks.narrow(1, chunk.offset, n);  // [world, n]: this parameter's chunks
  auto put = [&](torch::Tensor place, const torch::Tensor& source) {
    if (!gradient.defined()) {
      place.zero_();
    } else if (pre_divide != 1.0 && source.scalar_type() == place.scalar_type()) {
      torch::div_out(place, source, torch::scalar_tensor(pre_divide, place.options()));
    } else {
      place.copy_(source);
      if (pre_divide != 1.0) place.div_(pre_divide);
    }
  };
  const auto flat = gradient.defined() ? gradient.view({-1}) : torch::Tensor();
  if (full > 0) {
    put(columns.narrow(0, 0, full), flat.defined() ? flat.narrow(0, 0, full * n).view({full, n}) : flat);
  }
  if (rest > 0) put(columns[full].narrow(0, 0, rest), flat.defined() ? flat.narrow(0, full * n, rest) : flat);
  // The padding: the last rank's rows past the end, and the ranks after it.
  if (full < world) {
    columns[full].narrow(0, rest, n - rest).zero_();
    if (full + 1 < world) columns.narrow(0, full + 1, world - full - 1).zero_();
  }
}

}  // namespace volt::fsdp

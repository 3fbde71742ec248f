#include "strategies/fsdp/parameter_chunks.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

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

namespace {

int64_t round_up(int64_t value, int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

}  // namespace

BlockPlacement place_in_block(const std::vector<int64_t>& numels, const std::vector<bool>& first,
                              const std::vector<torch::Dtype>& dtypes) {
  BlockPlacement out;
  out.offsets.resize(numels.size());
  const bool bytes = std::any_of(dtypes.begin(), dtypes.end(), [&](torch::Dtype d) { return d != dtypes.front(); });
  if (!dtypes.empty()) out.dtype = bytes ? torch::kByte : dtypes.front();
  for (const bool pass_first : {true, false}) {
    for (size_t i = 0; i < numels.size(); ++i) {
      if (first[i] != pass_first) continue;
      if (bytes) out.numel = round_up(out.numel, kChunkAlignment);
      out.offsets[i] = out.numel;
      out.numel += numels[i] * (bytes ? static_cast<int64_t>(c10::elementSize(dtypes[i])) : 1);
    }
    if (pass_first) out.first_numel = out.numel;
  }
  // Every rank's block the same multiple: the next rank's chunks aligned too.
  if (bytes) out.numel = round_up(out.numel, kChunkAlignment);
  return out;
}

ChunkLayout layout_chunks(const std::vector<std::vector<int64_t>>& shapes, const std::vector<bool>& trainable,
                          int64_t world, const std::vector<torch::Dtype>& dtypes,
                          const std::vector<torch::Dtype>& gathered_dtypes) {
  VOLT_INTERNAL_ASSERT(trainable.size() == shapes.size() && (dtypes.empty() || dtypes.size() == shapes.size()) &&
                           (gathered_dtypes.empty() || gathered_dtypes.size() == shapes.size()),
                       "layout_chunks: one trainable flag and dtype per shape");
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
  std::vector<int64_t> numels;
  for (const auto& chunk : layout.chunks) numels.push_back(chunk.chunk_numel());
  // Trainable chunks first in each block: the gradient is the blocks' prefix.
  const auto shard = place_in_block(numels, trainable, dtypes);
  const auto gathered = place_in_block(numels, trainable, gathered_dtypes);
  const auto gradient = place_in_block(numels, trainable, {});  // one dtype: elements
  for (size_t i = 0; i < shapes.size(); ++i) {
    layout.chunks[i].offset = shard.offsets[i];
    layout.chunks[i].gathered_offset = gathered.offsets[i];
    layout.chunks[i].gradient_offset = gradient.offsets[i];
  }
  layout.block_numel = shard.numel;
  layout.block_dtype = shard.dtype;
  layout.gathered_numel = gathered.numel;
  layout.gathered_dtype = gathered.dtype;
  layout.gradient_numel = gradient.first_numel;
  return layout;
}

torch::Tensor typed_span(const torch::Tensor& block, int64_t offset, int64_t numel, torch::Dtype dtype) {
  if (block.scalar_type() == dtype) return block.narrow(-1, offset, numel);
  VOLT_INTERNAL_ASSERT(block.scalar_type() == torch::kByte && offset % kChunkAlignment == 0,
                       "typed_span: a block of the dtype, or of bytes at an aligned offset");
  return block.narrow(-1, offset, numel * static_cast<int64_t>(c10::elementSize(dtype))).view(dtype);
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

void copy_chunks_out(const torch::Tensor& columns, const ParameterChunk& chunk, const torch::Tensor& parameter) {
  const auto [full, rest] = full_ranks_and_rest(chunk);
  const int64_t n = chunk.chunk_numel();
  auto out = parameter.view({-1});
  if (full > 0) out.narrow(0, 0, full * n).view({full, n}).copy_(columns.narrow(0, 0, full));
  if (rest > 0) out.narrow(0, full * n, rest).copy_(columns[full].narrow(0, 0, rest));
}

void copy_chunks_in(const torch::Tensor& gradient, const ParameterChunk& chunk, const torch::Tensor& columns,
                    double pre_divide) {
  const auto [full, rest] = full_ranks_and_rest(chunk);
  const int64_t n = chunk.chunk_numel(), world = columns.size(0);
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

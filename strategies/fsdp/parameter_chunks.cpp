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

// The chunks placed one after another in a block, trainable ones first (the gradient is the
// block's prefix): in elements of the dtypes' one dtype, or in aligned bytes where they differ.
struct Placement {
  std::vector<int64_t> offsets;
  int64_t numel = 0, trainable_numel = 0;
  torch::Dtype dtype = torch::kFloat;
};

Placement place(const std::vector<ParameterChunk>& chunks, const std::vector<bool>& trainable,
                const std::vector<torch::Dtype>& dtypes) {
  Placement out;
  out.offsets.resize(chunks.size());
  const bool bytes = std::any_of(dtypes.begin(), dtypes.end(), [&](torch::Dtype d) { return d != dtypes.front(); });
  if (!dtypes.empty()) out.dtype = bytes ? torch::kByte : dtypes.front();
  for (const bool pass_trainable : {true, false}) {
    for (size_t i = 0; i < chunks.size(); ++i) {
      if (trainable[i] != pass_trainable) continue;
      if (bytes) out.numel = round_up(out.numel, kChunkAlignment);
      out.offsets[i] = out.numel;
      out.numel += chunks[i].chunk_numel() * (bytes ? static_cast<int64_t>(c10::elementSize(dtypes[i])) : 1);
    }
    if (pass_trainable) out.trainable_numel = out.numel;
  }
  // Every rank's block the same multiple: the next rank's chunks aligned too.
  if (bytes) out.numel = round_up(out.numel, kChunkAlignment);
  return out;
}

}  // namespace

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
  const auto shard = place(layout.chunks, trainable, dtypes);
  const auto gathered = place(layout.chunks, trainable, gathered_dtypes);
  const auto gradient = place(layout.chunks, trainable, {});  // one dtype: elements
  for (size_t i = 0; i < shapes.size(); ++i) {
    layout.chunks[i].offset = shard.offsets[i];
    layout.chunks[i].gathered_offset = gathered.offsets[i];
    layout.chunks[i].gradient_offset = gradient.offsets[i];
  }
  layout.block_numel = shard.numel;
  layout.block_dtype = shard.dtype;
  layout.gathered_numel = gathered.numel;
  layout.gathered_dtype = gathered.dtype;
  layout.gradient_numel = gradient.trainable_numel;
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

#include "strategies/fsdp/flat_slice.h"

#include <algorithm>

#include "checkpoint/sharded_checkpoint.h"
#include "core/error.h"

namespace volt::fsdp {

namespace {

// Writes `pieces` of `values` into `slice` (CPU, contiguous, zeroed), each at its position less
// `base`.
void read_pieces(const std::vector<FlatParameter::Piece>& pieces, const std::vector<torch::Tensor>& values,
                 const ShardedCheckpoint* source, const torch::Tensor& slice, int64_t base) {
  for (const auto& piece : pieces) {
    if (piece.count == 0) continue;
    auto target = slice.narrow(0, piece.position - base, piece.count);
    if (source != nullptr) {
      source->read(values[piece.entry], piece.begin, target);
    } else {
      target.copy_(values[piece.entry].detach().reshape({-1}).narrow(0, piece.begin, piece.count));
    }
  }
}

}  // namespace

void read_flat_slice_into(const FlatParameter& flat, const std::vector<torch::Tensor>& values,
                          const ShardedCheckpoint* source, const torch::Tensor& out) {
  VOLT_INTERNAL_ASSERT(values.size() == flat.entries().size(), "read_flat_slice: one value per entry");
  VOLT_INTERNAL_ASSERT(out.numel() == flat.shard_numel() && out.is_contiguous(),
                       "read_flat_slice: a shard-sized output");
  torch::NoGradGuard no_grad;
  const bool in_place = out.device().is_cpu();
  auto slice = in_place ? out.view({-1}) : torch::empty({flat.shard_numel()}, out.options().device(torch::kCPU));
  slice.zero_();
  read_pieces(flat.pieces(), values, source, slice, 0);
  if (!in_place) out.copy_(slice.view(out.sizes()));
}

torch::Tensor read_flat_slice(const FlatParameter& flat, const std::vector<torch::Tensor>& values,
                              const ShardedCheckpoint* source, c10::ScalarType dtype) {
  auto slice = torch::empty({flat.shard_numel()}, torch::TensorOptions().dtype(dtype));
  read_flat_slice_into(flat, values, source, slice);
  return slice;
}

torch::Tensor read_stepped_slice(const FlatParameter& flat, size_t entry, const std::vector<torch::Tensor>& values,
                                 const ShardedCheckpoint* source, c10::ScalarType dtype) {
  if (flat.layout() == ShardLayout::Flat) return read_flat_slice(flat, values, source, dtype);
  const auto& chunk = flat.entries().at(entry).chunk;
  torch::NoGradGuard no_grad;
  auto slice = torch::zeros({chunk.chunk_numel()}, torch::TensorOptions().dtype(dtype));
  auto pieces = flat.pieces();
  std::erase_if(pieces, [entry](const FlatParameter::Piece& piece) { return piece.entry != entry; });
  read_pieces(pieces, values, source, slice, chunk.offset);
  return slice.view(flat.stepped(entry).sizes());
}

}  // namespace volt::fsdp

#include "strategies/fsdp/flat_slice.h"

#include <algorithm>

#include "checkpoint/sharded_checkpoint.h"
#include "core/error.h"

namespace volt::fsdp {

void read_flat_slice_into(const FlatParameter& flat, const std::vector<torch::Tensor>& values,
                          const ShardedCheckpoint* source, const torch::Tensor& out) {
  VOLT_INTERNAL_ASSERT(values.size() == flat.entries().size(), "read_flat_slice: one value per entry");
  VOLT_INTERNAL_ASSERT(out.numel() == flat.shard_numel() && out.is_contiguous(),
                       "read_flat_slice: a shard-sized output");
  torch::NoGradGuard no_grad;
  const bool in_place = out.device().is_cpu();
  auto slice = in_place ? out.view({-1}) : torch::empty({flat.shard_numel()}, out.options().device(torch::kCPU));
  slice.zero_();
  const int64_t lo = flat.shard_offset(), hi = lo + flat.shard_numel();
  for (size_t i = 0; i < values.size(); ++i) {
    const auto& entry = flat.entries()[i];
    const int64_t begin = std::max(lo, entry.offset), end = std::min(hi, entry.offset + entry.numel());
    if (begin >= end) continue;
    auto target = slice.narrow(0, begin - lo, end - begin);
    if (source != nullptr) {
      source->read(values[i], begin - entry.offset, target);
    } else {
      target.copy_(values[i].detach().reshape({-1}).narrow(0, begin - entry.offset, end - begin));
    }
  }
  if (!in_place) out.copy_(slice.view(out.sizes()));
}

torch::Tensor read_flat_slice(const FlatParameter& flat, const std::vector<torch::Tensor>& values,
                              const ShardedCheckpoint* source, c10::ScalarType dtype) {
  auto slice = torch::empty({flat.shard_numel()}, torch::TensorOptions().dtype(dtype));
  read_flat_slice_into(flat, values, source, slice);
  return slice;
}

}  // namespace volt::fsdp

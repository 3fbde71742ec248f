#include "strategies/fsdp/flat_slice.h"

#include <algorithm>

#include "checkpoint/sharded_checkpoint.h"
#include "core/error.h"

namespace volt::fsdp {

torch::Tensor read_flat_slice(const FlatParameter& flat, const std::vector<torch::Tensor>& values,
                              const ShardedCheckpoint* source, c10::ScalarType dtype) {
  VOLT_INTERNAL_ASSERT(values.size() == flat.entries().size(), "read_flat_slice: one value per entry");
  torch::NoGradGuard no_grad;
  auto slice = torch::zeros({flat.shard_numel()}, torch::TensorOptions().dtype(dtype));
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
  return slice;
}

torch::Tensor materialized(const ShardedCheckpoint* source, const torch::Tensor& value) {
  return source != nullptr ? source->materialize(value) : value;
}

}  // namespace volt::fsdp

#pragma once
// Note [Loading a slice]
// A rank of fsdp keeps, of each unit, the slice [shard_offset, shard_offset + shard_numel) of the
// unit's flat tensor (its parameters flattened one after another, padded at the end). Loading a
// full layout (a full checkpoint, or a sharded one of another layout put together: Note [Reading
// a sharded checkpoint anywhere]) takes, of each parameter and of each of its per-element
// optimizer states, only the elements that fall into that slice, and writes them to their place
// in it; the padding is zero. Nothing of the size of a unit is built, and when the values are
// placeholders of a ShardedCheckpoint only the slice's byte ranges are read from the shard files:
// a rank's load then holds no more than its own slices plus one verification block per piece.
#include <torch/torch.h>

#include <vector>

#include "strategies/fsdp/flat_parameter.h"

namespace volt {
class ShardedCheckpoint;
}

namespace volt::fsdp {

// This rank's shard_numel() elements of the flat tensor made of `values` (one tensor per entry of
// `flat`, in entry order, of the entry's numel: real tensors or placeholders of `source`; `source`
// may be null when all are real), of `dtype`, on the CPU.
torch::Tensor read_flat_slice(const FlatParameter& flat, const std::vector<torch::Tensor>& values,
                              const ShardedCheckpoint* source, c10::ScalarType dtype);

// `value`'s values: read through `source` when it is one of its placeholders.
torch::Tensor materialized(const ShardedCheckpoint* source, const torch::Tensor& value);

}  // namespace volt::fsdp

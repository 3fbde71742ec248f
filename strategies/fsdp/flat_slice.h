#pragma once
// Note [Loading a slice]
// A rank of fsdp keeps, of each unit, the slice [shard_offset, shard_offset + shard_numel) of the
// unit's flat tensor (its parameters flattened one after another, padded at the end), or per
// parameter its rows of each (FlatParameter::pieces says which elements either way). Loading a
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

// Fills `out` (shard_numel() elements, contiguous, of any dtype and device) with this rank's
// slice of the flat tensor made of `values` (one tensor per entry of `flat`, in entry order, of
// the entry's numel: real tensors or placeholders of `source`; `source` may be null when all are
// real); the padding becomes zero. A CPU `out` is written in place, with no buffer between.
void read_flat_slice_into(const FlatParameter& flat, const std::vector<torch::Tensor>& values,
                          const ShardedCheckpoint* source, const torch::Tensor& out);

// The same slice in a new CPU tensor of `dtype`.
torch::Tensor read_flat_slice(const FlatParameter& flat, const std::vector<torch::Tensor>& values,
                              const ShardedCheckpoint* source, c10::ScalarType dtype);

// This rank's part of what the optimizer steps for entry `entry` (FlatParameter::stepped): the
// flat slice, or per parameter the entry's rows in its shard's shape (values[entry] alone is read).
torch::Tensor read_stepped_slice(const FlatParameter& flat, size_t entry, const std::vector<torch::Tensor>& values,
                                 const ShardedCheckpoint* source, c10::ScalarType dtype);

}  // namespace volt::fsdp

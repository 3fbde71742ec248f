#pragma once
// How fsdp cuts a unit's parameters into shards (fsdp:layout): one flat tensor cut into N slices
// (fairscale's and FSDP1's FlatParameter, flat_parameter.h), or each parameter on its first
// dimension (FSDP2's, Note [Per-parameter layout] in parameter_chunks.h).
namespace volt::fsdp {

enum class ShardLayout { Flat, PerParameter };

}  // namespace volt::fsdp

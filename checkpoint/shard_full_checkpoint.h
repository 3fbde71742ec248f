#pragma once
// A full checkpoint cut into the shards of a sharded checkpoint for N ranks (volt-ckpt convert).
#include <string>
#include <vector>

#include "core/state_dict.h"

namespace volt {

// Note [A full checkpoint sharded for N ranks]
// volt-ckpt convert writes a full checkpoint as a sharded directory for `world` ranks (the shards
// of one save, with their index), without the strategy that would write them: the model's
// floating-point tensors, one flat per dtype in state_dict order ("flat_shard.<dtype>"), sliced
// evenly like fsdp's (the last slice padded with zeros); its other tensors whole in every shard;
// each optimizer's per-parameter state "partitioned" (every parameter's state on one shard, the
// ranks balanced by bytes), or whole in every shard when it is LibTorch's own archive. The writer
// is named "volt-ckpt convert", so that no strategy takes the directory for its own layout: every
// strategy at every world size loads it as in the Note above, fsdp a slice at a time. Per rank and
// not in the full layout: each shard holds rank r's random state when the full checkpoint has one
// per rank, rank 0's otherwise. What the directory cannot hold (a strategy's own state, the
// gradients of an open accumulation window) is left out, one line each in `notes`.
std::vector<StateDict> shard_full_checkpoint(const StateDict& full, int64_t world,
                                             std::vector<std::string>* notes = nullptr);

}  // namespace volt

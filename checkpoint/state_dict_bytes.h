#pragma once
// A StateDict as bytes and back, exactly: for state that travels between ranks (a comm hook's
// per-rank state, a sharded optimizer's shard) rather than to a file. The bytes are LibTorch's
// pickle (torch::pickle_save, the format torch.save writes), so tensors come back bit for bit
// with their dtype, shape, strides and device, and nested dicts, lists, numbers, bools, strings
// and None come back as they were (a typed list comes back as a generic one, which StateDict's
// getters read alike).
#include <string>

#include "core/state_dict.h"

namespace volt {

std::string state_dict_to_bytes(const StateDict& state);
// Throws CheckpointError naming `what` when `bytes` are not a pickled StateDict.
StateDict state_dict_from_bytes(const std::string& bytes, const std::string& what = "state");

}  // namespace volt

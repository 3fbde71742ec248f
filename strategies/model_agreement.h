#pragma once
// Ranks of a data-parallel run must build the same model: same parameters and buffers, in the
// same order, with the same shapes and dtypes. Broadcasting rank 0's state into a different model
// would fail deep inside c10d or, worse, silently misalign tensors; this check names the first
// difference instead.
#include "distributed/communicator.h"

namespace volt {

// Compares every rank's parameter and buffer layout (names, shapes, dtypes) with rank 0's.
// Throws DistributedError on every rank when any rank differs; a differing rank names its first
// difference (rank 0's entry and its own). [collective]
void verify_same_model(Communicator& communicator, torch::nn::Module& module);

}  // namespace volt

#pragma once
// Per-rank state into one checkpoint: a comm hook's state (PowerSGD's error feedback differs per
// rank), a sharded optimizer's shards. Rank `root` gets every rank's StateDict; it writes them.
#include <vector>

#include "core/state_dict.h"
#include "distributed/communicator.h"

namespace volt {

// Every rank's `mine`, by rank, on `root` (exactly: checkpoint/state_dict_bytes.h); an empty
// vector on the other ranks. The dicts may differ in keys and sizes. Throws CheckpointError when
// a rank's bytes do not unpickle, naming that rank. [collective: two gathers]
std::vector<StateDict> gather_state_dicts(Communicator& communicator, const StateDict& mine, int64_t root = 0);

}  // namespace volt

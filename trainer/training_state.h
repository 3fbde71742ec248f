#pragma once
// The fit loop's part of a checkpoint (checkpoint["loops"]["fit_loop"]): its position, and what
// decides the order of the training batches, so that a resumed run continues at the next batch.
#include <string>
#include <vector>

#include "core/state_dict.h"
#include "data/data_loader.h"

namespace volt {

struct FitProgress;

StateDict fit_progress_state(const FitProgress& progress);
// Throws CheckpointError when a field is missing or of the wrong type.
FitProgress fit_progress_from(const StateDict& state);

// {"dataset_size", "batch_size", "shuffle", "seed", "drop_last", "world_size", "data_replicas"
// (Placement::data_replica's count: how many shares the epoch is dealt in; older checkpoints
// lack it and dealt one per rank), "samples" (this rank's share per epoch), "global_order" (whether the loader deals
// the epoch's global order, Note [The data position across world sizes])}: with the epoch and batch index these fix
// which samples the next batch holds (the samplers are pure functions of them).
StateDict train_data_state(const DataLoader& loader, int64_t world_size, int64_t data_replicas);
// The saved state's data replicas (its world size in checkpoints written before they were recorded).
int64_t saved_data_replicas(const StateDict& train_data);

// The fields of `saved` and `current` train_data_state()s that differ, as "name: saved → now".
std::vector<std::string> train_data_differences(const StateDict& saved, const StateDict& current);

}  // namespace volt

#pragma once
// State that differs per rank, in a checkpoint written by global rank 0: a list with one entry per
// global rank ("<name>_per_rank"), and this rank's entry read back (Note [Per-rank entries]).
//
// Note [Per-rank entries] A Full checkpoint holds one copy of what every rank agrees on; what does
// not agree (random generators, a window's accumulated gradients, post-local-SGD's local models,
// a comm hook's error memories) is gathered to rank 0 and stored as a list indexed by global rank.
// A run with the same world size takes its own entry; a run with another world size cannot say
// which entry is whose, so it takes none and the caller warns what starts afresh instead.
#include <optional>
#include <string>
#include <vector>

#include "core/state_dict.h"

namespace volt {

// `states` as one checkpoint value, a list; per rank, `states[r]` is global rank r's.
c10::IValue state_dict_list(const std::vector<StateDict>& states);

struct PerRankEntry {
  std::optional<StateDict> entry;  // this rank's; empty when the list has another length
  int64_t saved_ranks = 0;         // how many ranks wrote the list
};

// The entry of `rank` in the per-rank list `key` of `state`, written by `world_size` ranks; throws
// CheckpointError (naming `source`) when `key` is not a list.
PerRankEntry per_rank_entry(const StateDict& state, const std::string& key, int64_t rank, int64_t world_size,
                            const std::string& source);

// per_rank_entry's entry; nullopt, after a warning on global rank 0 ("<who>: the checkpoint's
// '<key>' holds N ranks, this run has M: <what_starts_afresh>"), when the list was written by
// another number of ranks.
std::optional<StateDict> per_rank_entry_or_warn(const StateDict& state, const std::string& key, int64_t rank,
                                                int64_t world_size, const std::string& who,
                                                const std::string& what_starts_afresh);

}  // namespace volt

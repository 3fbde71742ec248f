#pragma once
// What every volt checkpoint holds besides its contents, whoever writes it (the Trainer's
// checkpoint connector, the Fabric's save): the versions, the layout and, for a sharded one, which
// shard of how many (Note [What a checkpoint holds] in trainer/checkpoint_connector.h); and the
// checks a reader makes on them before it trusts the contents.
#include <string>

#include "core/state_dict.h"
#include "strategies/strategy.h"

namespace volt {

// "full" | "sharded", as the "layout" key stores it.
std::string checkpoint_layout_name(CheckpointLayout layout);
// The layout a checkpoint was written in (files without the key, e.g. edited in Python, are full).
CheckpointLayout checkpoint_layout_of(const StateDict& checkpoint);

// volt_version, format_version, layout and, for the Sharded layout, shard {rank, world_size} of
// this process in `strategy`'s topology and the save_id every shard of this save carries (Note [A
// save's identity]). [collective for the Sharded layout]
StateDict checkpoint_header(const Strategy& strategy, CheckpointLayout layout);

// Throws CheckpointError when `checkpoint` (named `source`) was written in a newer format, or is
// a sharded checkpoint that `strategy` cannot read (another strategy, another world size, or a
// strategy that does not shard). The writer's strategy name is read from its "strategy" section.
void check_checkpoint_readable(const StateDict& checkpoint, const Strategy& strategy, const std::string& source);

}  // namespace volt

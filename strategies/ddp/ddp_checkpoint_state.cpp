#include "strategies/ddp/ddp_checkpoint_state.h"

#include "checkpoint/per_rank_entries.h"
#include "strategies/averaging/local_model_checkpoint.h"
#include "strategies/ddp/reducer.h"
#include "strategies/part_context.h"
#include "strategies/strategy_collectives.h"

namespace volt {

DDPCheckpointState::DDPCheckpointState(const PartContext& context, const DDPSectionContext& section,
                                       CheckpointLayout layout)
    : CheckpointState(context, layout), section_(section) {}

StateDict DDPCheckpointState::strategy_state_dict(CheckpointLayout layout) {
  StateDict section;
  const StateDict mine = section_.reducer().state_dict();
  if (layout == CheckpointLayout::Sharded) {
    section.set("reducer", mine);
  } else if (const auto all = context().collectives().gather_states(mine); !all.empty()) {
    section.set("reducer_per_rank", state_dict_list(all));
  }
  if (auto* averager = section_.model_averager()) {
    averaging::save_averager_section(section, *averager, section_.local_model(), context().collectives(), layout);
  }
  return section;
}

void DDPCheckpointState::load_strategy_state_dict(const StateDict& state, CheckpointLayout layout) {
  bool reducer_restored = false;
  if (state.contains("reducer")) {
    section_.reducer().load_state_dict(state.child("reducer"));
    reducer_restored = true;
  } else if (state.contains("reducer_per_rank")) {
    // The averager is restored only with the reducer (load_averager_section), so it restarts too.
    const auto* averager = section_.model_averager();
    const std::string what = "buckets and the comm hook's state" +
                             (averager ? ", and the " + averager->name() + "'s step count and state," : std::string()) +
                             " start afresh";
    if (const auto mine = per_rank_entry_or_warn(state, "reducer_per_rank", context().topology().global_rank,
                                                 context().topology().world_size, context().name(), what)) {
      section_.reducer().load_state_dict(*mine);
      reducer_restored = true;
    }
  }
  averaging::load_averager_section(state, section_.model_averager(), reducer_restored, section_.local_model(),
                                   context().collectives(), context().name());
}

}  // namespace volt

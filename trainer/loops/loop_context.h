#pragma once
// Note [Loop context]: what the Trainer hands the parts that run its loops (FitLoop,
// EvaluationLoop, the CheckpointConnector, ManualOptimizer and the Module's helpers), fixed for
// the Trainer's life. The strategy comes here, mutable, because stepping, synchronizing and
// loading are the loops' business; the Trainer itself is there only for its public side: the
// callbacks' and loggers' hooks take a Trainer&, and the options and counters the loops read are
// its public accessors. So a loop reaches nothing of the Trainer's private state, and the Trainer
// needs no friend; callbacks get the strategy through Trainer::strategy(), which is const.
namespace volt {

class Strategy;
class Trainer;
struct LoopState;

struct LoopContext {
  Trainer& trainer;
  Strategy& strategy;
  LoopState& state;  // Note [Loop state]
};

}  // namespace volt

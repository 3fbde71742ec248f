#pragma once
// FitProgress: the fit loop's position, which the Trainer shows its callbacks (fit_progress())
// and a checkpoint stores (Note [Loop state]).
#include <cstdint>

namespace volt {

// Where the fit loop stands; everything a resumed run needs to continue at the next batch.
struct FitProgress {
  int64_t epoch = 0;           // current epoch (0-based)
  int64_t global_step = 0;     // optimizer steps taken (one per accumulation window)
  int64_t next_batch = 0;      // index, within `epoch`, of the next training batch to run
  int64_t window_micro_batches = 0;  // micro-batches accumulated so far in the open window
  bool window_has_backward = false;  // whether any of them ran backward
  // Where within a batch's aftermath the loop stands, so that a run resumed from a checkpoint
  // written in a hook neither repeats nor skips work: whether the validation check due after
  // batch next_batch - 1 has begun, and whether on_train_epoch_end has run for a *finished*
  // `epoch` (whose epoch-interval schedulers then still have to step). An epoch that a stop
  // condition (max_steps, max_time, should_stop) ended before its last batch is not finished:
  // its end hooks run, but epoch_end_started stays false, so that a run resumed from a
  // checkpoint written then continues the epoch at next_batch (Note [Interrupted epochs]).
  bool validation_checked = true;
  bool epoch_end_started = false;
};

}  // namespace volt

#pragma once
#include <cstdint>
#include <optional>

namespace volt {

// How values of one logged name combine over an epoch.
enum class ReduceFx { Mean, Sum, Max, Min };

// Options of Module::log, with Lightning's names and defaults. Where on_step/on_epoch are left
// unset they follow the hook that logs: a training_step logs on_step; validation_step and
// test_step, and every epoch-level hook, log on_epoch.
struct LogOptions {
  bool prog_bar = false;             // show on the progress bar
  bool logger = true;                // send to the loggers
  std::optional<bool> on_step;       // emit the value of each step
  std::optional<bool> on_epoch;      // emit the epoch aggregate (reduce_fx over the epoch)
  ReduceFx reduce_fx = ReduceFx::Mean;
  bool sync_dist = false;            // reduce across ranks (mean of ranks per step; exact per epoch)
  std::optional<int64_t> batch_size; // weight in an epoch mean; default: the current batch's size
};

}  // namespace volt

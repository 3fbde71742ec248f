#pragma once
#include <chrono>
#include <optional>
#include <string>

#include "callbacks/callback.h"
#include "core/option_schema.h"

namespace volt {

enum class TimerInterval { Step, Epoch };

struct TimerOptions {
  std::optional<std::chrono::seconds> duration;  // the training budget (required); 0: stop at once
  TimerInterval interval = TimerInterval::Step;  // check after every step or epoch
  bool verbose = true;                           // say when the time is up (rank 0)

  static const OptionSchema<TimerOptions>& schema();
  void validate() const { schema().validate(*this); }
};

// Stops fit once training has run for `duration` ("DD:HH:MM:SS"), Lightning's Timer. Training time
// runs from on_train_start to on_train_end (validation inside fit included) and is checked after
// every training batch (interval Step) or epoch (Epoch); the fit loop then ends at that step
// boundary with the usual epoch-end hooks, so checkpoints and logs stay consistent. The decision
// is rank 0's, broadcast through the strategy (a collective). The elapsed time is checkpointed:
// a resumed fit continues the same budget. Validation and test runs are timed too (time_elapsed).
class Timer : public Callback {
 public:
  explicit Timer(TimerOptions options);
  explicit Timer(const std::string& duration, TimerInterval interval = TimerInterval::Step, bool verbose = true);

  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;

  void on_train_start(Trainer& trainer, Module& module) override;
  void on_train_end(Trainer& trainer, Module& module) override;
  void on_validation_start(Trainer& trainer, Module& module) override;
  void on_validation_end(Trainer& trainer, Module& module) override;
  void on_test_start(Trainer& trainer, Module& module) override;
  void on_test_end(Trainer& trainer, Module& module) override;
  void on_train_batch_end(Trainer& trainer, Module& module, const torch::Tensor& loss, const Batch& batch,
                          int64_t batch_idx) override;
  void on_train_epoch_end(Trainer& trainer, Module& module) override;

  // Seconds spent in "train" (including time restored from a checkpoint), "validate" or "test".
  double time_elapsed(const std::string& stage = "train") const;
  // The training budget left, in seconds (never negative).
  double time_remaining() const;
  std::chrono::seconds duration() const { return duration_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct StageClock {
    std::optional<Clock::time_point> start, end;
    double offset = 0;  // seconds from before a resume
    double elapsed() const;
  };
  const StageClock* find_clock(const std::string& stage) const;
  void check_time(Trainer& trainer);

  std::chrono::seconds duration_;
  TimerInterval interval_;
  bool verbose_;
  StageClock train_, validate_, test_;
};

}  // namespace volt

#pragma once
// Lightning's ThroughputMonitor: how fast training goes, over a window of recent batches.
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "callbacks/callback.h"
#include "core/option_schema.h"

namespace volt {

struct ThroughputMonitorOptions {
  int64_t window = 100;          // batches the rates are averaged over; >= 2
  double flops_per_sample = 0;   // the model's FLOPs (forward + backward) per sample; 0: not counted
  double peak_flops = 0;         // the device's peak FLOP/s for MFU; 0: the known peak of the device (if any)
  int64_t items_per_sample = 0;  // items (tokens) per sample; 0: items not counted, unless `items` is set
  // Items in a batch, computed from it (e.g. its input's numel for token batches); overrides
  // items_per_sample. Code only.
  std::function<int64_t(const Batch&)> items;

  static const OptionSchema<ThroughputMonitorOptions>& schema();
  void validate() const { schema().validate(*this); }
};

// Note [Throughput without a synchronization]: the monitor timestamps each training batch's end
// on the host and never waits for the device (Lightning's calls torch.cuda.synchronize() every
// batch). The host may run ahead of a GPU, but only by what the device's queue and the caching
// allocator let it (and every read of a metric realigns them), so over a window of `window`
// batches the host's rate is the device's rate up to that queue's depth divided by the window.
// Validation time is left out.
//
// Logged every log_every_n_steps optimizer steps (keys as Lightning's, with "train/"):
// batches_per_sec, samples_per_sec, items_per_sec and flops_per_sec over all ranks, the same per
// device under "train/device/", and train/device/mfu (flops_per_sec / peak) when FLOPs and a peak
// are known. The ranks of one data-parallel replica (a pipeline's stages, a tensor-parallel group)
// take the same samples: the totals count each replica's once (this rank's rate times the
// replicas: the world size under data parallelism), and a device's FLOP/s is its share of the
// model's, the replica's over its ranks (MFU's model FLOPs per device). The progress bar shows samples (or
// items) per second and MFU.
class ThroughputMonitor : public Callback {
 public:
  explicit ThroughputMonitor(ThroughputMonitorOptions options = {});

  void on_train_start(Trainer& trainer, Module& module) override;
  void on_train_batch_end(Trainer& trainer, Module& module, const torch::Tensor& loss, const Batch& batch,
                          int64_t batch_idx) override;
  void on_validation_start(Trainer& trainer, Module& module) override;
  void on_validation_end(Trainer& trainer, Module& module) override;

  // The rates over the current window (empty before two batches ended).
  std::map<std::string, double> current_values(const Trainer& trainer) const;
  // The peak FLOP/s MFU is computed against: given, or the device's known one; 0 when neither.
  double peak_flops() const { return peak_flops_; }

 private:
  struct Mark {
    double seconds;  // training time (validation left out) at the batch's end
    int64_t batches, samples, items;
  };
  // Per second over the window, on this process.
  struct Rates {
    double batches, samples, items, flops_per_sample;
    double flops() const { return samples * flops_per_sample; }
  };
  using Clock = std::chrono::steady_clock;
  double training_seconds() const;
  bool counts_items() const;
  // The world size, the data-parallel replicas, and a device's share of its replica's FLOPs.
  struct Shares {
    double world, replicas, device_share_of_flops;
  };
  static Shares shares_of(const Trainer& trainer);
  std::optional<Rates> window_rates() const;  // nullopt before two batches ended

  ThroughputMonitorOptions options_;
  double peak_flops_ = 0;
  Clock::time_point started_;
  Clock::duration paused_{};
  std::optional<Clock::time_point> pause_started_;
  std::deque<Mark> window_;
  int64_t batches_ = 0, samples_ = 0, items_ = 0;
  int64_t last_logged_step_ = -1;
};

}  // namespace volt

#include "callbacks/throughput_monitor.h"

#include "core/device_peak_flops.h"
#include "core/error.h"
#include "precision/precision.h"
#include "strategies/strategy.h"
#include "trainer/trainer.h"

namespace volt {

const OptionSchema<ThroughputMonitorOptions>& ThroughputMonitorOptions::schema() {
  static const auto schema =
      OptionSchema<ThroughputMonitorOptions>("ThroughputMonitor")
          .option("window", &ThroughputMonitorOptions::window, "batches the rates are averaged over", at_least(2))
          .option("flops_per_sample", &ThroughputMonitorOptions::flops_per_sample,
                  "the model's FLOPs (forward + backward) per sample; 0: FLOPs not counted", at_least(0.0))
          .option("peak_flops", &ThroughputMonitorOptions::peak_flops,
                  "the device's peak FLOP/s for MFU; 0: the known peak of the device, if any", at_least(0.0))
          .option("items_per_sample", &ThroughputMonitorOptions::items_per_sample,
                  "items (tokens) per sample; 0: items not counted", at_least(int64_t{0}));
  return schema;
}

ThroughputMonitor::ThroughputMonitor(ThroughputMonitorOptions options) : options_(std::move(options)) {
  options_.validate();
}

void ThroughputMonitor::on_train_start(Trainer& trainer, Module&) {
  peak_flops_ = options_.peak_flops;
  if (peak_flops_ == 0) {
    if (auto name = device_name(trainer.root_device())) {
      peak_flops_ = known_peak_flops(*name, trainer.strategy().precision().compute_dtype()).value_or(0.0);
    }
  }
  started_ = Clock::now();
  paused_ = {};
  pause_started_.reset();
  window_.clear();
  batches_ = samples_ = items_ = 0;
  last_logged_step_ = -1;
}

double ThroughputMonitor::training_seconds() const {
  return std::chrono::duration<double>(Clock::now() - started_ - paused_).count();
}

void ThroughputMonitor::on_train_batch_end(Trainer& trainer, Module&, const torch::Tensor&, const Batch& batch,
                                           int64_t) {
  ++batches_;
  samples_ += batch.size();
  if (options_.items) {
    items_ += options_.items(batch);
  } else {
    items_ += options_.items_per_sample * batch.size();
  }
  window_.push_back({training_seconds(), batches_, samples_, items_});
  if (static_cast<int64_t>(window_.size()) > options_.window) window_.pop_front();

  const auto rates = window_rates();
  if (!rates) return;
  // The bar's two numbers every batch (host arithmetic only); the whole table at the loggers' cadence.
  const auto shares = shares_of(trainer);
  std::map<std::string, double> bar;
  if (counts_items()) {
    bar["train/items_per_sec"] = rates->items * shares.replicas;
  } else {
    bar["train/samples_per_sec"] = rates->samples * shares.replicas;
  }
  if (options_.flops_per_sample > 0 && peak_flops_ > 0) {
    bar["train/device/mfu"] = rates->flops() * shares.device_share_of_flops / peak_flops_;
  }
  trainer.show_on_progress_bar(bar);
  // Every log_every_n_steps optimizer steps, once, after the step that reached it.
  const int64_t step = trainer.global_step();
  if (step > 0 && step % trainer.options().log_every_n_steps == 0 && step != last_logged_step_) {
    last_logged_step_ = step;
    trainer.log_metrics(current_values(trainer));
  }
}

ThroughputMonitor::Shares ThroughputMonitor::shares_of(const Trainer& trainer) {
  const auto world = static_cast<double>(trainer.world_size());
  const auto replicas = static_cast<double>(trainer.strategy().placement().data_replica().count);
  return {world, replicas, replicas / world};
}

bool ThroughputMonitor::counts_items() const { return options_.items || options_.items_per_sample > 0; }

std::optional<ThroughputMonitor::Rates> ThroughputMonitor::window_rates() const {
  if (window_.size() < 2) return std::nullopt;
  const Mark& first = window_.front();
  const Mark& last = window_.back();
  const double seconds = last.seconds - first.seconds;
  if (seconds <= 0) return std::nullopt;
  const auto per_second = [&](int64_t later, int64_t earlier) {
    return static_cast<double>(later - earlier) / seconds;
  };
  return Rates{per_second(last.batches, first.batches), per_second(last.samples, first.samples),
               per_second(last.items, first.items), options_.flops_per_sample};
}

void ThroughputMonitor::on_validation_start(Trainer& trainer, Module&) {
  if (trainer.stage() != RunningStage::SanityChecking) pause_started_ = Clock::now();
}

void ThroughputMonitor::on_validation_end(Trainer&, Module&) {
  if (pause_started_) paused_ += Clock::now() - *pause_started_;
  pause_started_.reset();
}

std::map<std::string, double> ThroughputMonitor::current_values(const Trainer& trainer) const {
  std::map<std::string, double> out;
  const auto rates = window_rates();
  if (!rates) return out;
  const auto shares = shares_of(trainer);
  // What this device takes in, and all replicas together: the ranks of one replica take the same.
  const auto put = [&](const std::string& name, double per_device) {
    out["train/device/" + name] = per_device;
    out["train/" + name] = per_device * shares.replicas;
  };
  put("batches_per_sec", rates->batches);
  put("samples_per_sec", rates->samples);
  if (counts_items()) put("items_per_sec", rates->items);
  if (options_.flops_per_sample > 0) {
    // The model's FLOPs of the replica's samples, this device's share of them.
    const double device_flops = rates->flops() * shares.device_share_of_flops;
    out["train/device/flops_per_sec"] = device_flops;
    out["train/flops_per_sec"] = device_flops * shares.world;
    if (peak_flops_ > 0) out["train/device/mfu"] = device_flops / peak_flops_;
  }
  return out;
}

}  // namespace volt

#pragma once
// A Trainer run at its defaults (progress bar, CSV logger, checkpointing) with logging, clipping, a
// scheduler, accumulation, validation and a ThroughputMonitor, observed by a HostSyncObserver: the
// shared body of the CPU and CUDA tests that a training step reads no value on the host.
#include <memory>
#include <string>
#include <vector>

#include "callbacks/throughput_monitor.h"
#include "core/host_sync_observer.h"
#include "tests/support/regression_problem.h"
#include "tests/support/test_support.h"

namespace volt::testing {

// RegressionModule that also shows a value on the progress bar and an epoch mean, and may read
// its loss on the host in training_step (what a user's code can do; the tests must see it).
class HostSyncModule : public RegressionModule {
 public:
  explicit HostSyncModule(bool read_loss)
      : RegressionModule({.adam = true, .step_scheduler = true}), read_loss_(read_loss) {}
  torch::Tensor training_step(const Batch& batch, int64_t batch_idx) override {
    auto loss = RegressionModule::training_step(batch, batch_idx);
    log("loss_bar", loss, {.prog_bar = true, .on_epoch = true});
    if (read_loss_) last_loss = loss.item<double>();
    return loss;
  }
  double last_loss = 0;

 private:
  bool read_loss_;
};

struct HostSyncRun {
  std::vector<std::string> sites;  // HostSyncObserver::sites()
  int64_t train_batches = 0, bar_refreshes = 0, logger_writes = 0, global_step = 0;

  // The reads inside a training step ("volt::train_batch"); epoch ends, validation and checkpoints
  // are outside steps.
  std::vector<std::string> reads_in_steps() const {
    std::vector<std::string> out;
    for (const auto& site : sites) {
      if (site.find("volt::train_batch") != std::string::npos) out.push_back(site);
    }
    return out;
  }
  // Those not made for the progress bar's refresh or a logger's write.
  std::vector<std::string> unasked_reads_in_steps() const {
    std::vector<std::string> out;
    for (const auto& site : reads_in_steps()) {
      const auto has = [&](const char* part) { return site.find(part) != std::string::npos; };
      if (!(has("volt::read_metrics") && (has("volt::progress_bar_refresh") || has("volt::loggers")))) {
        out.push_back(site);
      }
    }
    return out;
  }
};

// 100 optimizer steps of 2 micro-batches each (800 samples in batches of 4, one epoch).
inline HostSyncRun train_observing_host_reads(bool read_loss, const std::string& accelerator = "cpu",
                                              const std::string& precision = "32-true") {
  TemporaryDirectory dir;
  TrainerOptions options;
  options.default_root_dir = dir.path();
  options.accelerator = accelerator;
  options.precision = precision;
  options.max_epochs = 1;
  options.accumulate_grad_batches = 2;
  options.gradient_clip_val = 1.0;
  auto model = std::make_shared<HostSyncModule>(read_loss);
  Trainer trainer(options);
  trainer.add_callback(
      std::make_shared<ThroughputMonitor>(ThroughputMonitorOptions{.flops_per_sample = 1e3, .peak_flops = 1e9}));
  HostSyncObserver observer;
  trainer.fit(model, std::make_shared<RegressionData>(800, 4, true, 0, 16));
  return {observer.sites(), observer.entered("volt::train_batch"), observer.entered("volt::progress_bar_refresh"),
          observer.entered("volt::loggers"), trainer.global_step()};
}

}  // namespace volt::testing

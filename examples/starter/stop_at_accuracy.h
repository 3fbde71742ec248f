#pragma once
// A custom callback: ends training once the validation accuracy reaches a target. Callbacks see
// the Trainer's public state (callback_metrics, current_epoch) and may ask it to stop.
#include <iostream>

#include "trainer/volt.h"

namespace starter {

class StopAtAccuracy : public volt::Callback {
 public:
  explicit StopAtAccuracy(double target) : target_(target) {}

  void on_validation_end(volt::Trainer& trainer, volt::Module&) override {
    if (trainer.sanity_checking()) return;
    const auto& metrics = trainer.callback_metrics();
    const auto acc = metrics.find("val_acc");
    if (acc == metrics.end() || acc->second < target_) return;
    // val_acc is synchronized across processes, so every rank decides the same way.
    if (trainer.is_global_zero()) {
      std::cout << "StopAtAccuracy: val_acc " << acc->second << " >= " << target_ << " after epoch "
                << trainer.current_epoch() << "; stopping" << std::endl;
    }
    trainer.set_should_stop(true);
  }

 private:
  double target_;
};

}  // namespace starter

#include "callbacks/gradient_accumulation_scheduler.h"

#include <sstream>

#include "core/error.h"
#include "trainer/trainer.h"

namespace volt {

GradientAccumulationScheduler::GradientAccumulationScheduler(std::map<int64_t, int64_t> scheduling)
    : scheduling_(std::move(scheduling)) {
  check<ConfigurationError>(!scheduling_.empty(),
                            "GradientAccumulationScheduler: expected at least one epoch:factor pair, got none");
  for (const auto& [epoch, factor] : scheduling_) {
    check<ConfigurationError>(epoch >= 0, "GradientAccumulationScheduler: expected epochs >= 0 (0-based), got ",
                              epoch);
    check<ConfigurationError>(factor >= 1, "GradientAccumulationScheduler: expected factors >= 1, got ", factor,
                              " for epoch ", epoch);
  }
}

std::map<int64_t, int64_t> GradientAccumulationScheduler::parse(const std::string& text) {
  std::map<int64_t, int64_t> scheduling;
  std::istringstream pairs(text);
  std::string pair;
  while (std::getline(pairs, pair, ';')) {
    if (pair.find_first_not_of(' ') == std::string::npos) continue;
    std::istringstream in(pair);
    int64_t epoch = 0, factor = 0;
    char colon = 0;
    in >> epoch >> colon >> factor;
    check<ConfigurationError>(!in.fail() && colon == ':' && (in >> std::ws).eof(),
                              "GradientAccumulationScheduler: expected 'epoch:factor' pairs separated by ';' "
                              "(e.g. 0:8;4:4), got '", pair, "' in '", text, "'");
    check<ConfigurationError>(!scheduling.count(epoch), "GradientAccumulationScheduler: epoch ", epoch,
                              " is given twice in '", text, "'");
    scheduling[epoch] = factor;
  }
  return scheduling;
}

int64_t GradientAccumulationScheduler::factor_for_epoch(int64_t epoch) const {
  auto after = scheduling_.upper_bound(epoch);
  return after == scheduling_.begin() ? 1 : std::prev(after)->second;
}

void GradientAccumulationScheduler::on_train_start(Trainer& trainer, Module&) {
  check<ConfigurationError>(trainer.options().accumulate_grad_batches == 1,
                            "GradientAccumulationScheduler: the Trainer's accumulate_grad_batches is ",
                            trainer.options().accumulate_grad_batches,
                            "; use either --accumulate-grad-batches or the scheduler, not both");
}

void GradientAccumulationScheduler::on_train_epoch_start(Trainer& trainer, Module&) {
  trainer.set_accumulate_grad_batches(factor_for_epoch(trainer.current_epoch()));
}

}  // namespace volt

#include "callbacks/gradient_accumulation_scheduler.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"
#include "trainer/trainer.h"

namespace volt {

namespace {

using Schedule = std::map<int64_t, int64_t>;

std::string format_schedule(const Schedule& scheduling) {
  std::string text;
  for (const auto& [epoch, factor] : scheduling) {
    if (!text.empty()) text += ';';
    text.append(std::to_string(epoch)).append(":").append(std::to_string(factor));
  }
  return text;
}

bool is_valid_schedule(const Schedule& scheduling) {
  return !scheduling.empty() && std::all_of(scheduling.begin(), scheduling.end(), [](const auto& entry) {
    return entry.first >= 0 && entry.second >= 1;
  });
}

}  // namespace

const OptionSchema<GradientAccumulationSchedulerOptions>& GradientAccumulationSchedulerOptions::schema() {
  static const auto schema =
      OptionSchema<GradientAccumulationSchedulerOptions>("GradientAccumulationScheduler")
          .option("scheduling", &GradientAccumulationSchedulerOptions::scheduling,
                  TextForm<Schedule>{"epoch:factor pairs separated by ';' (e.g. 0:8;4:4)",
                                     GradientAccumulationScheduler::parse, format_schedule},
                  "micro-batches per optimizer step from each epoch on (required)",
                  satisfies(is_valid_schedule, "at least one pair, with epochs >= 0 (0-based) and factors >= 1"));
  return schema;
}

GradientAccumulationScheduler::GradientAccumulationScheduler(GradientAccumulationSchedulerOptions options) {
  options.validate();
  scheduling_ = std::move(options.scheduling);
}

GradientAccumulationScheduler::GradientAccumulationScheduler(std::map<int64_t, int64_t> scheduling)
    : GradientAccumulationScheduler(GradientAccumulationSchedulerOptions{std::move(scheduling)}) {}

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

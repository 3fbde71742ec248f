#include "callbacks/progress_bar.h"

#include <unistd.h>

#include <cstdio>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "core/error.h"
#include "core/named_scope.h"
#include "trainer/trainer.h"

namespace volt {
namespace {

std::string clock_text(double seconds) {
  const auto s = static_cast<int64_t>(seconds + 0.5);
  std::ostringstream out;
  out << std::setfill('0');
  if (s >= 3600) out << s / 3600 << ":" << std::setw(2);
  out << (s / 60) % 60 << ":" << std::setw(2) << s % 60;
  return out.str();
}

std::string stage_label(const Trainer& trainer) {
  switch (trainer.stage()) {
    case RunningStage::SanityChecking: return "Sanity check";
    case RunningStage::Testing: return "Testing";
    case RunningStage::Predicting: return "Predicting";
    default: return "Validation";
  }
}

}  // namespace

const OptionSchema<ProgressBarOptions>& ProgressBarOptions::schema() {
  static const auto schema =
      OptionSchema<ProgressBarOptions>("ProgressBar")
          .option("refresh_rate", &ProgressBarOptions::refresh_rate,
                  "batches between updates (to turn the bar off: --enable-progress-bar false)", at_least(1))
          .option("plain", &ProgressBarOptions::plain, "a line per update even on a terminal");
  return schema;
}

ProgressBar::ProgressBar(ProgressBarOptions options) {
  options.validate();
  refresh_rate_ = options.refresh_rate;
  interactive_ = !options.plain && isatty(STDOUT_FILENO);
}

ProgressBar::ProgressBar(int64_t refresh_rate, bool force_plain)
    : ProgressBar(ProgressBarOptions{.refresh_rate = refresh_rate, .plain = force_plain}) {}

void ProgressBar::start(const Trainer& trainer) { started_ = std::chrono::steady_clock::now(); }

std::string ProgressBar::render(const Trainer& trainer, const std::string& label, int64_t done,
                                int64_t total) const {
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  const double rate = elapsed > 0 ? static_cast<double>(done) / elapsed : 0.0;
  std::ostringstream out;
  out << label << ": " << done << "/" << total << " [" << clock_text(elapsed);
  if (rate > 0 && done < total) out << "<" << clock_text(static_cast<double>(total - done) / rate);
  out << ", " << std::fixed << std::setprecision(2) << rate << "it/s]";
  if (trainer.stage() == RunningStage::Training) {
    for (const auto& [name, value] : trainer.progress_bar_metrics()) {
      out << " " << name << "=" << std::setprecision(4) << std::defaultfloat << value;
    }
  }
  return out.str();
}

void ProgressBar::update(const Trainer& trainer, const std::string& label, int64_t done, int64_t total,
                         bool final) {
  if (!trainer.is_global_zero()) return;
  if (!final && done % refresh_rate_ != 0) return;
  NamedScope scope("volt::progress_bar_refresh");
  const std::string line = render(trainer, label, done, total);
  if (interactive_) {
    std::cout << "\r\033[K" << line << std::flush;
    line_open_ = true;
    if (final) std::cout << std::endl, line_open_ = false;
  } else if (final || done % refresh_rate_ == 0) {
    std::cout << line << std::endl;
  }
}

void ProgressBar::on_train_epoch_start(Trainer& trainer, Module&) {
  start(trainer);
  train_started_ = started_;
}

void ProgressBar::on_train_batch_end(Trainer& trainer, Module&, const torch::Tensor&, const Batch&,
                                     int64_t batch_idx) {
  started_ = train_started_;
  // Plain output would flood a log at refresh_rate 1; a line per 5% is enough there.
  const int64_t total = trainer.num_training_batches();
  if (!interactive_ && refresh_rate_ == 1 && (batch_idx + 1) % std::max<int64_t>(1, total / 20) != 0) return;
  update(trainer, "Epoch " + std::to_string(trainer.current_epoch()), batch_idx + 1, total,
         /*final=*/false);
}

void ProgressBar::on_train_epoch_end(Trainer& trainer, Module&) {
  started_ = train_started_;
  update(trainer, "Epoch " + std::to_string(trainer.current_epoch()), trainer.fit_progress().next_batch,
         trainer.num_training_batches(), /*final=*/true);
}

void ProgressBar::on_validation_start(Trainer& trainer, Module&) {
  if (line_open_ && trainer.is_global_zero()) std::cout << std::endl, line_open_ = false;
  start(trainer);
}

void ProgressBar::on_validation_batch_end(Trainer& trainer, Module&, const Batch&, int64_t batch_idx) {
  if (interactive_) update(trainer, stage_label(trainer), batch_idx + 1, trainer.num_eval_batches(), false);
}

void ProgressBar::on_validation_end(Trainer& trainer, Module&) {
  if (!trainer.is_global_zero()) return;
  if (interactive_ && line_open_) std::cout << "\r\033[K", line_open_ = false;
  if (trainer.sanity_checking()) return;
  std::ostringstream out;
  out << stage_label(trainer) << " (epoch " << trainer.current_epoch() << ", step " << trainer.global_step() << ")";
  for (const auto& [name, value] : trainer.progress_bar_metrics()) out << " " << name << "=" << value;
  std::cout << out.str() << std::endl;
}

void ProgressBar::on_test_start(Trainer& trainer, Module&) { start(trainer); }

void ProgressBar::on_test_batch_end(Trainer& trainer, Module&, const Batch&, int64_t batch_idx) {
  if (interactive_) update(trainer, "Testing", batch_idx + 1, trainer.num_eval_batches(), false);
}

void ProgressBar::on_test_end(Trainer& trainer, Module&) {
  update(trainer, "Testing", trainer.num_eval_batches(), trainer.num_eval_batches(), true);
}

void ProgressBar::on_predict_start(Trainer& trainer, Module&) { start(trainer); }

void ProgressBar::on_predict_batch_end(Trainer& trainer, Module&, const torch::Tensor&, const Batch&,
                                       int64_t batch_idx) {
  if (interactive_) update(trainer, "Predicting", batch_idx + 1, trainer.num_eval_batches(), false);
}

void ProgressBar::on_predict_end(Trainer& trainer, Module&) {
  update(trainer, "Predicting", trainer.num_eval_batches(), trainer.num_eval_batches(), true);
}

}  // namespace volt

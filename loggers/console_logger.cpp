#include "loggers/console_logger.h"

#include <iomanip>
#include <iostream>
#include <sstream>

namespace volt {

ConsoleLogger::ConsoleLogger(std::ostream* out) : out_(out ? *out : std::cout) {}

std::string ConsoleLogger::table(const std::string& title, const std::map<std::string, double>& metrics) {
  size_t width = 6;
  for (const auto& [name, value] : metrics) width = std::max(width, name.size());
  std::ostringstream out;
  const std::string rule(width + 16, '-');
  out << title << "\n" << rule << "\n"
      << std::left << std::setw(static_cast<int>(width)) << "metric" << "  " << std::right << std::setw(14)
      << "value" << "\n"
      << rule << "\n";
  for (const auto& [name, value] : metrics) {
    out << std::left << std::setw(static_cast<int>(width)) << name << "  " << std::right << std::setw(14)
        << std::setprecision(6) << value << "\n";
  }
  out << rule << "\n";
  return out.str();
}

void ConsoleLogger::log_metrics(const std::map<std::string, double>& metrics, int64_t) {
  for (const auto& [name, value] : metrics) {
    if (name != "epoch") pending_[name] = value;
  }
}

void ConsoleLogger::log_epoch_end(const torch::nn::Module&, int64_t epoch, int64_t step) {
  if (pending_.empty()) return;
  out_ << table("Epoch " + std::to_string(epoch) + " (step " + std::to_string(step) + ")", pending_)
       << std::flush;
  pending_.clear();
}

void ConsoleLogger::finalize(TrainerStatus) {
  if (pending_.empty()) return;
  out_ << table("Results", pending_) << std::flush;
  pending_.clear();
}

}  // namespace volt

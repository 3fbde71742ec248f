#include "loggers/csv_logger.h"

#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "trainer/error.h"

namespace volt {
namespace {

std::string format_number(double value) {
  std::ostringstream out;
  out << std::setprecision(9) << value;
  return out.str();
}

}  // namespace

CSVLogger::CSVLogger(std::string save_dir, std::string name, int64_t version, int64_t flush_every_n_steps)
    : name_(name), directory_(std::move(save_dir), std::move(name), version),
      flush_every_n_steps_(flush_every_n_steps) {
  check<ConfigurationError>(flush_every_n_steps >= 1, "CSVLogger: expected flush_every_n_steps >= 1, got ",
                            flush_every_n_steps);
}

void CSVLogger::log_metrics(const std::map<std::string, double>& metrics, int64_t step) {
  auto row = metrics;
  row["step"] = static_cast<double>(step);
  for (const auto& [key, value] : row) columns_.insert(key);
  rows_.push_back(std::move(row));
  if (++rows_since_save_ >= flush_every_n_steps_) save();
}

void CSVLogger::log_hyperparams(const Hyperparameters& hparams) {
  directory_.create();
  std::ofstream out(std::filesystem::path(log_dir()) / "hparams.yaml");
  for (const auto& [key, value] : hparams) out << key << ": " << to_string(value) << "\n";
  check<ConfigurationError>(out.good(), "CSVLogger: cannot write ", log_dir(), "/hparams.yaml");
}

void CSVLogger::save() {
  rows_since_save_ = 0;
  directory_.create();
  // step and epoch first, as Lightning writes them; the rest by name.
  std::vector<std::string> header{"step"};
  if (columns_.count("epoch")) header.push_back("epoch");
  for (const auto& column : columns_) {
    if (column != "step" && column != "epoch") header.push_back(column);
  }
  const auto path = std::filesystem::path(log_dir()) / "metrics.csv";
  const auto temporary = path.string() + ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    for (size_t i = 0; i < header.size(); ++i) out << (i ? "," : "") << header[i];
    out << "\n";
    for (const auto& row : rows_) {
      for (size_t i = 0; i < header.size(); ++i) {
        if (i) out << ",";
        auto found = row.find(header[i]);
        if (found == row.end()) continue;
        out << (header[i] == "step" || header[i] == "epoch"
                    ? std::to_string(static_cast<int64_t>(found->second))
                    : format_number(found->second));
      }
      out << "\n";
    }
    check<ConfigurationError>(out.good(), "CSVLogger: cannot write ", temporary);
  }
  std::filesystem::rename(temporary, path);
}

}  // namespace volt

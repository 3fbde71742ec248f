#include "loggers/csv_logger.h"

#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "loggers/hparams_yaml.h"
#include "core/error.h"

namespace volt {
namespace {

std::string format_number(double value) {
  std::ostringstream out;
  out << std::setprecision(9) << value;
  return out.str();
}

// RFC 4180 quoting for a header cell (metric names may hold commas or quotes).
std::string csv_cell(const std::string& text) {
  if (text.find_first_of(",\"\n\r") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

void write_header(std::ostream& out, const std::vector<std::string>& header) {
  for (size_t i = 0; i < header.size(); ++i) out << (i ? "," : "") << csv_cell(header[i]);
  out << "\n";
}

}  // namespace

const OptionSchema<CSVLoggerOptions>& CSVLoggerOptions::schema() {
  static const auto schema = log_directory_schema<CSVLoggerOptions>("CSVLogger")
                                 .option("flush_every_n_steps", &CSVLoggerOptions::flush_every_n_steps,
                                         "append to metrics.csv every n rows", at_least(1));
  return schema;
}

CSVLogger::CSVLogger(CSVLoggerOptions options)
    : name_(options.name), directory_(options.save_dir, options.name, options.version),
      flush_every_n_steps_(options.flush_every_n_steps) {
  options.validate();
}

CSVLogger::CSVLogger(std::string save_dir, std::string name, int64_t version, int64_t flush_every_n_steps)
    : CSVLogger(CSVLoggerOptions{std::move(save_dir), std::move(name), version, flush_every_n_steps}) {}

void CSVLogger::log_metrics(const std::map<std::string, double>& metrics, int64_t step) {
  auto row = metrics;
  row["step"] = static_cast<double>(step);
  pending_.push_back(std::move(row));
  if (static_cast<int64_t>(pending_.size()) >= flush_every_n_steps_) save();
}

void CSVLogger::log_hyperparams(const Hyperparameters& hparams) {
  directory_.create();
  write_hparams_yaml((std::filesystem::path(log_dir()) / "hparams.yaml").string(), hparams);
}

void CSVLogger::save() {
  if (pending_.empty()) return;
  directory_.create();
  // step and epoch first, as Lightning's readers expect them; then metrics as they appear.
  const size_t old_columns = header_.size();
  if (header_.empty()) header_ = {"step", "epoch"};
  for (const auto& row : pending_) {
    for (const auto& [key, value] : row) {
      if (std::find(header_.begin(), header_.end(), key) == header_.end()) header_.push_back(key);
    }
  }
  const auto path = std::filesystem::path(log_dir()) / "metrics.csv";
  if (file_started_ && header_.size() != old_columns) widen_file(old_columns);

  std::ofstream out(path, file_started_ ? std::ios::app : std::ios::trunc);
  if (!file_started_) write_header(out, header_);
  for (const auto& row : pending_) {
    for (size_t i = 0; i < header_.size(); ++i) {
      if (i) out << ",";
      auto found = row.find(header_[i]);
      if (found == row.end()) continue;
      out << (header_[i] == "step" || header_[i] == "epoch" ? std::to_string(static_cast<int64_t>(found->second))
                                                           : format_number(found->second));
    }
    out << "\n";
  }
  out.flush();
  check<ConfigurationError>(out.good(), "CSVLogger: cannot write '", path.string(),
                            "'; check free space and permissions");
  file_started_ = true;
  pending_.clear();
}

void CSVLogger::widen_file(size_t old_columns) {
  const auto path = std::filesystem::path(log_dir()) / "metrics.csv";
  const auto temporary = path.string() + ".tmp";
  {
    std::ifstream in(path);
    std::ofstream out(temporary, std::ios::trunc);
    check<ConfigurationError>(in.good() && out.good(), "CSVLogger: cannot rewrite '", path.string(),
                              "' with new columns; check that it still exists and is writable");
    write_header(out, header_);
    const std::string blanks(header_.size() - old_columns, ',');
    std::string line;
    std::getline(in, line);  // the old header
    while (std::getline(in, line)) out << line << blanks << "\n";
    out.flush();
    check<ConfigurationError>(out.good(), "CSVLogger: cannot write '", temporary,
                              "'; check free space and permissions");
  }
  std::filesystem::rename(temporary, path);
}

}  // namespace volt

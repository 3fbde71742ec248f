#include "csv_data.h"

#include <cmath>
#include <fstream>
#include <sstream>
#include <vector>

namespace starter {
namespace {

std::vector<double> parse_row(const std::string& line, const std::string& path, int64_t line_number) {
  std::vector<double> values;
  std::stringstream cells(line);
  std::string cell;
  while (std::getline(cells, cell, ',')) {
    try {
      size_t used = 0;
      values.push_back(std::stod(cell, &used));
      if (used != cell.size() && cell.find_first_not_of(" \r", used) != std::string::npos)
        throw std::invalid_argument(cell);
    } catch (const std::logic_error&) {
      throw volt::DataError("CsvData: " + path + ":" + std::to_string(line_number) + ": expected a number, got '" +
                            cell + "'; every cell after the header line must be numeric");
    }
  }
  return values;
}

}  // namespace

CsvData::CsvData(CsvDataOptions options) : options_(std::move(options)) {
  volt::check<volt::ConfigurationError>(options_.val_fraction > 0 && options_.val_fraction < 1,
                                        "CsvData: expected a validation fraction in (0, 1), got ",
                                        options_.val_fraction);
}

void CsvData::setup(volt::TrainerFn) {
  if (train_) return;
  std::ifstream file(options_.path);
  volt::check<volt::DataError>(file.good(), "CsvData: cannot read '", options_.path,
                               "'; pass --csv with a CSV file whose last column is the label");
  std::string line;
  std::getline(file, line);  // the header
  std::vector<std::vector<double>> rows;
  for (int64_t line_number = 2; std::getline(file, line); ++line_number) {
    if (line.empty() || line == "\r") continue;
    rows.push_back(parse_row(line, options_.path, line_number));
    volt::check<volt::DataError>(rows.back().size() >= 2 && rows.back().size() == rows.front().size(),
                                 "CsvData: ", options_.path, ":", line_number, ": expected ",
                                 std::max<size_t>(rows.front().size(), 2), " columns, got ", rows.back().size());
  }
  volt::check<volt::DataError>(rows.size() >= 2, "CsvData: ", options_.path, " has ", rows.size(),
                               " data rows; a train/validation split needs at least 2");

  const auto n = static_cast<int64_t>(rows.size());
  num_features_ = static_cast<int64_t>(rows.front().size()) - 1;
  auto features = torch::empty({n, num_features_});
  auto labels = torch::empty({n}, torch::kLong);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < num_features_; ++j) features[i][j] = rows[i][j];
    const double label = rows[i].back();
    volt::check<volt::DataError>(label >= 0 && label == std::floor(label), "CsvData: ", options_.path,
                                 ": row ", i + 2, " has label ", label, "; labels must be 0, 1, 2, ...");
    labels[i] = static_cast<int64_t>(label);
  }
  num_classes_ = labels.max().item<int64_t>() + 1;

  auto dataset = std::make_shared<volt::TensorDataset>(features, labels);
  const auto val_size = std::max<int64_t>(1, static_cast<int64_t>(options_.val_fraction * n));
  auto splits = volt::random_split(dataset, {n - val_size, val_size}, options_.seed);
  train_ = splits[0];
  val_ = splits[1];
}

std::shared_ptr<volt::DataLoader> CsvData::train_dataloader() {
  return std::make_shared<volt::DataLoader>(
      train_, volt::DataLoaderOptions{.batch_size = options_.batch_size, .shuffle = true, .seed = options_.seed});
}

std::shared_ptr<volt::DataLoader> CsvData::val_dataloader() {
  return std::make_shared<volt::DataLoader>(val_, volt::DataLoaderOptions{.batch_size = options_.batch_size});
}

}  // namespace starter

#include "strategies/averaging/hierarchical_model_averager.h"

#include <sstream>

#include "core/error.h"
#include "strategies/averaging/parameter_mean.h"

namespace volt::averaging {
namespace {

int64_t parse_count(const std::string& text, const std::string& whole) {
  size_t used = 0;
  int64_t value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  check<ConfigurationError>(!text.empty() && used == text.size(), "expected 'period:group_size,...' of integers "
                            "(e.g. 2:4,8:8), got '", whole, "'");
  return value;
}

}  // namespace

std::vector<AveragingLevel> parse_averaging_levels(const std::string& text) {
  std::vector<AveragingLevel> levels;
  std::istringstream pieces(text);
  std::string piece;
  while (std::getline(pieces, piece, ',')) {
    const auto colon = piece.find(':');
    check<ConfigurationError>(colon != std::string::npos, "expected 'period:group_size,...' (e.g. 2:4,8:8), got '",
                              text, "'");
    levels.push_back({parse_count(piece.substr(0, colon), text), parse_count(piece.substr(colon + 1), text)});
  }
  check<ConfigurationError>(!levels.empty(), "expected at least one 'period:group_size', got '", text, "'");
  return levels;
}

std::string format_averaging_levels(const std::vector<AveragingLevel>& levels) {
  std::string text;  // built by appending: GCC 12 warns falsely on "literal" + std::string
  for (const auto& level : levels) {
    if (!text.empty()) text += ',';
    text.append(std::to_string(level.period)).append(1, ':').append(std::to_string(level.group_size));
  }
  return text;
}

void check_averaging_levels(const std::vector<AveragingLevel>& levels) {
  const std::string text = format_averaging_levels(levels);
  check<ConfigurationError>(!levels.empty(), "model_averaging_periods: expected at least one period:group_size, got "
                            "none");
  for (size_t i = 0; i < levels.size(); ++i) {
    check<ConfigurationError>(levels[i].period >= 1, "model_averaging_periods: expected periods >= 1, got ",
                              levels[i].period, " in '", text, "'");
    check<ConfigurationError>(levels[i].group_size >= 1, "model_averaging_periods: expected group sizes >= 1, got ",
                              levels[i].group_size, " in '", text, "'");
    if (i == 0) continue;
    check<ConfigurationError>(levels[i].period > levels[i - 1].period, "model_averaging_periods: expected "
                              "increasing periods (each step averages at the level of the largest period dividing "
                              "it), got ", levels[i - 1].period, " before ", levels[i].period, " in '", text,
                              "'; list the levels from the most frequent to the world");
    check<ConfigurationError>(levels[i].group_size % levels[i - 1].group_size == 0, "model_averaging_periods: "
                              "expected each group size to divide the next (a level's groups are unions of the "
                              "previous level's), got ", levels[i - 1].group_size, " before ", levels[i].group_size,
                              " in '", text, "'");
  }
}

void check_averaging_levels(const std::vector<AveragingLevel>& levels, int64_t world_size) {
  check_averaging_levels(levels);
  const std::string text = format_averaging_levels(levels);
  for (const auto& level : levels) {
    check<ConfigurationError>(world_size % level.group_size == 0, "model_averaging_periods: expected group sizes "
                              "that divide the world size ", world_size, ", got ", level.group_size, " in '", text,
                              "'");
  }
  check<ConfigurationError>(levels.back().group_size == world_size, "model_averaging_periods: expected the last "
                            "group size to be the world size ", world_size, " (the top level averages every rank), "
                            "got ", levels.back().group_size, " in '", text, "'; end the list with ':", world_size,
                            "'");
}

HierarchicalModelAverager::HierarchicalModelAverager(Topology& topology, std::vector<AveragingLevel> levels,
                                                     int64_t warmup_steps)
    : ModelAverager(warmup_steps), levels_(std::move(levels)) {
  check_averaging_levels(levels_, topology.world_size());
  for (const auto& level : levels_) groups_.push_back(&topology.consecutive_group(level.group_size));
}

int64_t HierarchicalModelAverager::level_at(int64_t step) const {
  if (step < warmup_steps()) return -1;
  for (int64_t i = static_cast<int64_t>(levels_.size()) - 1; i >= 0; --i) {
    if (step % levels_[static_cast<size_t>(i)].period == 0) return i;
  }
  return -1;
}

void HierarchicalModelAverager::average_parameters(const std::vector<torch::Tensor>& parameters) {
  const int64_t level = level_at(step_);
  if (level >= 0) replace_by_mean(parameters, *groups_[static_cast<size_t>(level)]);
  ++step_;
}

}  // namespace volt::averaging

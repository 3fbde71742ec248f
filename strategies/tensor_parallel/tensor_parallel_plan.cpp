#include "strategies/tensor_parallel/tensor_parallel_plan.h"

#include <sstream>

#include "core/error.h"

namespace volt::tp {

namespace {

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, separator);) parts.push_back(part);
  if (!text.empty() && text.back() == separator) parts.emplace_back();
  return parts;
}

}  // namespace

std::vector<PlanEntry> parse_tensor_parallel_plan(const std::string& text) {
  check<ConfigurationError>(!text.empty(), "tensor_parallel: the plan is empty; name the modules to split as ",
                            "path:style entries joined by '|', e.g. plan=body.0:colwise|body.2:rowwise");
  std::vector<PlanEntry> plan;
  for (const auto& entry : split(text, '|')) {
    const auto colon = entry.find(':');
    check<ConfigurationError>(colon != std::string::npos, "tensor_parallel: plan entry '", entry,
                              "' has no style; write path:colwise or path:rowwise");
    const std::string path = entry.substr(0, colon);
    const auto fields = split(entry.substr(colon + 1), ':');  // style[:fused]
    const std::string& style = fields.front();
    for (const auto& component : split(path, '.')) {
      check<ConfigurationError>(!component.empty(), "tensor_parallel: plan entry '", entry,
                                "' has an empty path component; write module paths as named_modules() names them, "
                                "e.g. blocks.0.fc (or blocks.*.fc)");
    }
    check<ConfigurationError>(style == "colwise" || style == "rowwise", "tensor_parallel: plan entry '", entry,
                              "' has style '", style, "'; the styles are colwise and rowwise (colwise:N for a linear ",
                              "of N fused projections)");
    PlanEntry parsed{path, style == "colwise" ? ParallelStyle::Colwise : ParallelStyle::Rowwise};
    if (fields.size() > 1) {
      const std::string& count = fields[1];
      const bool number = fields.size() == 2 && !count.empty() && count.size() <= 6 &&
                          count.find_first_not_of("0123456789") == std::string::npos;
      check<ConfigurationError>(number && std::stoll(count) >= 1, "tensor_parallel: plan entry '", entry,
                                "' has fused count '", entry.substr(colon + 1 + style.size() + 1),
                                "'; write colwise:N with N >= 1, the projections fused in the linear's output (3 for "
                                "q|k|v)");
      check<ConfigurationError>(parsed.style == ParallelStyle::Colwise, "tensor_parallel: plan entry '", entry,
                                "' fuses a rowwise split; a fused count applies to colwise linears (their outputs)");
      parsed.fused = std::stoll(count);
    }
    plan.push_back(parsed);
  }
  return plan;
}

std::string to_string(ParallelStyle style) { return style == ParallelStyle::Colwise ? "colwise" : "rowwise"; }

std::string to_string(const PlanEntry& entry) {
  return entry.pattern + ":" + to_string(entry.style) + (entry.fused > 1 ? ":" + std::to_string(entry.fused) : "");
}

bool path_matches(const std::string& pattern, const std::string& path) {
  const auto want = split(pattern, '.'), have = split(path, '.');
  if (want.size() != have.size()) return false;
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] != "*" && want[i] != have[i]) return false;
  }
  return true;
}

}  // namespace volt::tp

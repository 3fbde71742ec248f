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
    const auto colon = entry.rfind(':');
    check<ConfigurationError>(colon != std::string::npos, "tensor_parallel: plan entry '", entry,
                              "' has no style; write path:colwise or path:rowwise");
    const std::string path = entry.substr(0, colon), style = entry.substr(colon + 1);
    for (const auto& component : split(path, '.')) {
      check<ConfigurationError>(!component.empty(), "tensor_parallel: plan entry '", entry,
                                "' has an empty path component; write module paths as named_modules() names them, "
                                "e.g. blocks.0.fc (or blocks.*.fc)");
    }
    check<ConfigurationError>(style == "colwise" || style == "rowwise", "tensor_parallel: plan entry '", entry,
                              "' has style '", style, "'; the styles are colwise and rowwise");
    plan.push_back({path, style == "colwise" ? ParallelStyle::Colwise : ParallelStyle::Rowwise});
  }
  return plan;
}

std::string to_string(ParallelStyle style) { return style == ParallelStyle::Colwise ? "colwise" : "rowwise"; }

bool path_matches(const std::string& pattern, const std::string& path) {
  const auto want = split(pattern, '.'), have = split(path, '.');
  if (want.size() != have.size()) return false;
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] != "*" && want[i] != have[i]) return false;
  }
  return true;
}

}  // namespace volt::tp

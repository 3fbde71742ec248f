#include "callbacks/checkpoint_filename.h"

#include <cmath>
#include <cstdio>
#include <regex>

#include "core/error.h"
#include "core/float_format.h"

namespace volt {
namespace {

std::string format_value(const std::string& name, double value, bool integral, const std::string& spec) {
  if (spec.empty()) return integral ? std::to_string(static_cast<int64_t>(value)) : python_float_repr(value);
  static const std::regex pattern("(0?)([0-9]*)(?:\\.([0-9]+))?([fegd]?)");
  std::smatch m;
  check<ConfigurationError>(std::regex_match(spec, m, pattern), "ModelCheckpoint: the filename field '{", name, ":",
                            spec, "}' has a format spec outside [0][width][.precision][f|e|g|d]");
  const std::string type = m[4].matched && m[4].length() ? m[4].str() : (integral ? "d" : "g");
  std::string format("%");
  format.append(m[1].str()).append(m[2].str());
  char buffer[128];
  if (type == "d") {
    check<ConfigurationError>(!m[3].matched, "ModelCheckpoint: '{", name, ":", spec, "}': 'd' takes no precision");
    std::snprintf(buffer, sizeof(buffer), (format + "lld").c_str(), static_cast<long long>(std::llround(value)));
  } else {
    if (m[3].matched) format.append(".").append(m[3].str());
    std::snprintf(buffer, sizeof(buffer), (format + type).c_str(), value);
  }
  return buffer;
}

}  // namespace

std::string format_checkpoint_name(const std::string& pattern, const std::map<std::string, double>& metrics,
                                   int64_t epoch, int64_t step, bool auto_insert_metric_name) {
  std::string out;
  size_t pos = 0;
  while (pos < pattern.size()) {
    const size_t open = pattern.find('{', pos);
    if (open == std::string::npos) {
      out += pattern.substr(pos);
      break;
    }
    out += pattern.substr(pos, open - pos);
    const size_t close = pattern.find('}', open);
    check<ConfigurationError>(close != std::string::npos, "ModelCheckpoint: unclosed '{' in filename '", pattern, "'");
    const std::string field = pattern.substr(open + 1, close - open - 1);
    const size_t colon = field.find(':');
    const std::string name = field.substr(0, colon);
    const std::string spec = colon == std::string::npos ? "" : field.substr(colon + 1);
    check<ConfigurationError>(!name.empty(), "ModelCheckpoint: empty field '{", field, "}' in filename '", pattern,
                              "'");
    double value = 0;
    bool integral = false;
    if (name == "epoch") {
      value = static_cast<double>(epoch), integral = true;
    } else if (name == "step") {
      value = static_cast<double>(step), integral = true;
    } else if (auto found = metrics.find(name); found != metrics.end()) {
      value = found->second;
    }
    if (auto_insert_metric_name) out += name + "=";
    out += format_value(name, value, integral, spec);
    pos = close + 1;
  }
  return out;
}

}  // namespace volt

#include "loggers/hparams_yaml.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>

#include "core/error.h"
#include "core/float_format.h"

namespace volt {
namespace {

bool plain_string_is_safe(const std::string& s) {
  if (s.empty()) return false;
  const unsigned char first = static_cast<unsigned char>(s[0]);
  if (!(std::isalpha(first) || first == '_' || first == '/')) return false;
  for (unsigned char c : s) {
    if (!(std::isalnum(c) || c == '_' || c == '.' || c == '/' || c == '-')) return false;
  }
  // YAML 1.1 reads these as booleans or null.
  static const std::set<std::string> reserved{"y", "n", "yes", "no", "on", "off", "true", "false", "null"};
  std::string lower;
  for (unsigned char c : s) lower.push_back(static_cast<char>(std::tolower(c)));
  return !reserved.count(lower);
}

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char escape[8];
          std::snprintf(escape, sizeof(escape), "\\x%02X", c);
          out += escape;
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  return out + "\"";
}

std::string yaml_string(const std::string& s) { return plain_string_is_safe(s) ? s : quoted(s); }

std::string yaml_float(double v) {
  if (std::isnan(v)) return ".nan";
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  std::string text = python_float_repr(v);
  if (text.find('.') == std::string::npos) text.insert(text.find('e'), ".0");  // "1e-05" → "1.0e-05"
  return text;
}

}  // namespace

std::string yaml_scalar(const HyperparameterValue& value) {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool>) return v ? "true" : "false";
        else if constexpr (std::is_same_v<T, int64_t>) return std::to_string(v);
        else if constexpr (std::is_same_v<T, double>) return yaml_float(v);
        else return yaml_string(v);
      },
      value);
}

void write_hparams_yaml(const std::string& path, const Hyperparameters& hparams) {
  std::ofstream out(path, std::ios::trunc);
  if (hparams.empty()) out << "{}\n";
  for (const auto& [name, value] : hparams) out << yaml_string(name) << ": " << yaml_scalar(value) << "\n";
  out.flush();
  check<ConfigurationError>(out.good(), "Logger: cannot write '", path, "'; check free space and permissions");
}

}  // namespace volt

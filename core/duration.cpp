#include "core/duration.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <regex>

#include "core/error.h"

namespace volt {

std::chrono::seconds parse_duration(const std::string& text, const std::string& what) {
  static const std::regex pattern("([0-9]{1,6}):([0-9]{1,2}):([0-9]{1,2}):([0-9]{1,2})");
  std::smatch m;
  check<ConfigurationError>(std::regex_match(text, m, pattern), what,
                            ": expected DD:HH:MM:SS (e.g. 00:12:00:00), got '", text, "'");
  const int64_t days = std::stoll(m[1]), hours = std::stoll(m[2]), minutes = std::stoll(m[3]),
                seconds = std::stoll(m[4]);
  check<ConfigurationError>(hours < 24 && minutes < 60 && seconds < 60, what,
                            ": expected hours < 24, minutes and seconds < 60 in '", text, "'");
  return std::chrono::seconds(((days * 24 + hours) * 60 + minutes) * 60 + seconds);
}

std::string format_duration(std::chrono::seconds duration) {
  const int64_t total = duration.count();
  char text[48];
  std::snprintf(text, sizeof(text), "%02lld:%02lld:%02lld:%02lld", static_cast<long long>(total / 86400),
                static_cast<long long>(total / 3600 % 24), static_cast<long long>(total / 60 % 60),
                static_cast<long long>(total % 60));
  return text;
}

TextForm<std::chrono::seconds> duration_form() {
  return {"a duration DD:HH:MM:SS", [](const std::string& text) { return parse_duration(text, "duration"); },
          format_duration};
}

TextForm<std::chrono::milliseconds> seconds_form() {
  auto parse = [](const std::string& text) {
    char* end = nullptr;
    const double seconds = std::strtod(text.c_str(), &end);
    check<ConfigurationError>(!text.empty() && end == text.c_str() + text.size() && std::isfinite(seconds) &&
                                  std::abs(seconds) < 1e9,
                              "expected a number of seconds, got '", text, "'");
    return std::chrono::milliseconds(std::llround(seconds * 1000.0));
  };
  auto format = [](const std::chrono::milliseconds& duration) {
    return option_detail::format_double(static_cast<double>(duration.count()) / 1000.0);
  };
  return {"seconds", parse, format};
}

}  // namespace volt

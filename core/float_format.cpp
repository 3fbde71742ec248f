#include "core/float_format.h"

#include <charconv>
#include <cmath>

namespace volt {

std::string python_float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  // Python switches to exponent notation below 1e-4 and from 1e16 on.
  const double magnitude = std::abs(value);
  const bool scientific = magnitude != 0 && (magnitude < 1e-4 || magnitude >= 1e16);
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value,
                                    scientific ? std::chars_format::scientific : std::chars_format::fixed);
  std::string text(buffer, result.ptr);
  if (!scientific && text.find('.') == std::string::npos) text += ".0";
  return text;
}

}  // namespace volt

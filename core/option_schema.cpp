#include "core/option_schema.h"

#include <charconv>
#include <cmath>

namespace volt::option_detail {

std::string format_double(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char text[64];
  // std::to_chars without a precision writes the shortest text that reads back exactly.
  const auto result = std::to_chars(text, text + sizeof(text), value);
  return std::string(text, result.ptr);
}

}  // namespace volt::option_detail

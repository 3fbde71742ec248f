#include "run/batch_limit.h"

#include <cmath>
#include <sstream>

#include "core/error.h"

namespace volt {

BatchLimit BatchLimit::fraction(double value) {
  check<ConfigurationError>(value >= 0.0 && value <= 1.0,
                            "BatchLimit: expected a fraction in [0, 1], got ", value);
  BatchLimit limit;
  limit.is_fraction_ = true;
  limit.fraction_ = value;
  return limit;
}

BatchLimit BatchLimit::count(int64_t value) {
  check<ConfigurationError>(value >= 0, "BatchLimit: expected a count >= 0, got ", value);
  BatchLimit limit;
  limit.is_fraction_ = false;
  limit.count_ = value;
  return limit;
}

BatchLimit BatchLimit::parse(const std::string& text, const std::string& flag) {
  const bool looks_fractional = text.find_first_of(".eE") != std::string::npos;
  std::istringstream in(text);
  if (looks_fractional) {
    double value = 0;
    in >> value;
    check<ConfigurationError>(!in.fail() && in.eof() && value >= 0.0 && value <= 1.0, flag,
                              ": expected a fraction in [0.0, 1.0] or a whole number of batches, got '",
                              text, "'");
    return fraction(value);
  }
  int64_t value = 0;
  in >> value;
  check<ConfigurationError>(!in.fail() && in.eof() && value >= 0, flag,
                            ": expected a whole number of batches >= 0 or a fraction like 0.5, got '",
                            text, "'");
  return count(value);
}

int64_t BatchLimit::resolve(int64_t available) const {
  if (!is_fraction_) return std::min(count_, available);
  if (fraction_ == 0.0 || available == 0) return 0;
  const auto n = static_cast<int64_t>(std::floor(fraction_ * static_cast<double>(available)));
  return std::max<int64_t>(1, n);
}

std::string BatchLimit::to_string() const {
  if (!is_fraction_) return std::to_string(count_);
  std::ostringstream out;
  out << fraction_;
  auto text = out.str();
  return text.find('.') == std::string::npos ? text + ".0" : text;
}

}  // namespace volt

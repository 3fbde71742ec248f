#pragma once
#include <cstdint>
#include <string>

namespace volt {

// "How many batches": a fraction of what is available (written with a decimal point: 0.25, 1.0)
// or a count (written without: 10). Lightning's float-or-int options (limit_*_batches,
// val_check_interval, overfit_batches).
class BatchLimit {
 public:
  static BatchLimit fraction(double value);  // in [0, 1]
  static BatchLimit count(int64_t value);    // >= 0
  // Parses "0.25" (fraction) or "10" (count); throws ConfigurationError naming `flag` otherwise.
  static BatchLimit parse(const std::string& text, const std::string& flag);

  bool is_fraction() const { return is_fraction_; }
  double fraction_value() const { return fraction_; }
  int64_t count_value() const { return count_; }
  // Applied to `available` batches: a fraction rounds down (but at least one batch when the
  // fraction is positive and any are available); a count is capped at `available`.
  int64_t resolve(int64_t available) const;
  // 0 batches / 0.0: the loop is disabled.
  bool is_zero() const { return is_fraction_ ? fraction_ == 0.0 : count_ == 0; }
  std::string to_string() const;

 private:
  bool is_fraction_ = true;
  double fraction_ = 1.0;
  int64_t count_ = 0;
};

}  // namespace volt

#pragma once
#include <string>

namespace volt {

// `value` as Python's repr(float) writes it: the shortest text that reads back to the same
// double, with ".0" on integral values ("0.1", "1.0", "1e-05", "1.5e+20", "nan", "inf", "-inf").
std::string python_float_repr(double value);

}  // namespace volt

#pragma once
// What the benchmarks share: reading their flags, summarizing repeated timings.
#include <boost/program_options.hpp>

#include <algorithm>
#include <iostream>
#include <vector>

namespace volt::bench {

// The median of `values` (the mean of the middle two for an even count); robust to the outliers
// a shared machine produces. Expects at least one value.
inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

// Stores argv into the variables `flags` binds. Returns false after printing the flags when
// --help was given (the benchmark should then stop); throws on an unknown flag or a bad value.
inline bool parse_flags(int argc, char** argv, const boost::program_options::options_description& flags) {
  boost::program_options::variables_map values;
  boost::program_options::store(boost::program_options::parse_command_line(argc, argv, flags), values);
  boost::program_options::notify(values);
  if (values.count("help")) {
    std::cout << flags;
    return false;
  }
  return true;
}

}  // namespace volt::bench

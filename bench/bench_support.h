#pragma once
// What every benchmark needs to summarize repeated timings.
#include <algorithm>
#include <vector>

namespace volt::bench {

// The median of `values` (the mean of the middle two for an even count); robust to the outliers
// a shared machine produces. Expects at least one value.
inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

}  // namespace volt::bench

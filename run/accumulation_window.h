#pragma once
#include <algorithm>
#include <cstdint>

namespace volt {

// Which accumulation window a training batch belongs to. Windows are consecutive runs of
// `accumulate` batches from the start of the epoch; the last one may be shorter. A micro-batch's
// loss is divided by the size of *its* window, so a partial last window is averaged over its own
// micro-batches (Lightning divides by `accumulate` there, which under-weights it).
struct AccumulationWindow {
  int64_t size = 1;     // micro-batches in this window
  int64_t position = 0; // 0-based position of the batch within it
  bool closes() const { return position + 1 == size; }  // the window's last micro-batch: step after it
};

inline AccumulationWindow accumulation_window(int64_t batch_idx, int64_t num_batches, int64_t accumulate) {
  const int64_t start = batch_idx / accumulate * accumulate;
  return {std::min(accumulate, num_batches - start), batch_idx - start};
}

}  // namespace volt

#pragma once
// Bookkeeping for static_graph=true: the promise that every iteration uses the same parameters,
// each receiving the same number of gradients. The first synchronized iteration records, per
// parameter, how many times its gradient accumulator fired (0: unused); later iterations trust
// the record: unused parameters are ready before backward starts (no graph search), and a
// parameter is ready when its last expected gradient has arrived, so one used twice through
// re-entrant backward is reduced once. Only synchronized iterations count (no_sync micro-batches
// are neither recorded nor checked), which is what lets static_graph work with accumulation.
//
// Not thread-safe; owned by the Reducer.
#include <cstdint>
#include <string>
#include <vector>

namespace volt::ddp {

class StaticGraphRecord {
 public:
  explicit StaticGraphRecord(size_t num_parameters) : expected_(num_parameters, 0), seen_(num_parameters, 0) {}

  bool recorded() const { return recorded_; }
  // Starts counting a synchronized iteration's gradients.
  void start_iteration();
  // Parameter `index`'s accumulator fired. Returns whether that was its last expected gradient
  // this iteration (always false while recording). Throws ConfigurationError when it fires more
  // often than recorded (`name` names it): the graph is not static.
  bool gradient_arrived(size_t index, const std::string& name);
  // Ends the recording iteration: what was seen becomes what is expected.
  void finish_recording();
  // The parameters the record says are unused (valid once recorded()).
  const std::vector<size_t>& unused() const { return unused_; }
  int64_t seen_gradients(size_t index) const { return seen_.at(index); }

 private:
  bool recorded_ = false;
  std::vector<int64_t> expected_;
  std::vector<int64_t> seen_;
  std::vector<size_t> unused_;
};

}  // namespace volt::ddp

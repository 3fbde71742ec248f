#include "strategies/ddp/static_graph.h"

#include <algorithm>

#include "core/error.h"

namespace volt::ddp {

void StaticGraphRecord::start_iteration() { std::fill(seen_.begin(), seen_.end(), 0); }

bool StaticGraphRecord::gradient_arrived(size_t index, const std::string& name) {
  const int64_t seen = ++seen_.at(index);
  if (!recorded_) return false;
  check<ConfigurationError>(seen <= expected_[index], "DDP static_graph: parameter '", name, "' received ", seen,
                            " gradients in this iteration but ", expected_[index],
                            " in the first one, so the graph is not static; drop static_graph=true (use "
                            "find_unused_parameters=true if the set of used parameters changes)");
  return seen == expected_[index];
}

void StaticGraphRecord::finish_recording() {
  expected_ = seen_;
  unused_.clear();
  for (size_t i = 0; i < expected_.size(); ++i) {
    if (expected_[i] == 0) unused_.push_back(i);
  }
  recorded_ = true;
}

}  // namespace volt::ddp

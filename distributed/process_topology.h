#pragma once
#include <cstdint>

namespace volt {

// Where this process sits among all processes of the run. Ranks are numbered 0..world_size-1;
// local ranks 0..local_world_size-1 on each node.
struct ProcessTopology {
  int64_t global_rank = 0;
  int64_t world_size = 1;
  int64_t local_rank = 0;
  int64_t local_world_size = 1;
  int64_t node_rank = 0;
  int64_t num_nodes = 1;
};

}  // namespace volt

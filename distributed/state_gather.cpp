#include "distributed/state_gather.h"

#include "checkpoint/state_dict_bytes.h"

namespace volt {

std::vector<StateDict> gather_state_dicts(Communicator& communicator, const StateDict& mine, int64_t root) {
  const auto gathered = communicator.gather_bytes(state_dict_to_bytes(mine), root);
  std::vector<StateDict> states;
  for (size_t r = 0; r < gathered.size(); ++r) {
    states.push_back(state_dict_from_bytes(gathered[r], "state gathered from rank " + std::to_string(r)));
  }
  return states;
}

}  // namespace volt

#include "strategies/communicator_collectives.h"

#include "core/collective_site.h"
#include "distributed/communicator.h"
#include "distributed/state_gather.h"
#include "strategies/decision_site.h"

namespace volt {

ProcessTopology CommunicatorCollectives::topology() const { return group_.cluster_topology(); }

torch::Device CommunicatorCollectives::root_device() const { return context_.root_device(); }

torch::Tensor CommunicatorCollectives::all_reduce(const torch::Tensor& value, ReduceOp op) {
  auto reduced = value.detach().clone();
  group_.communicator().all_reduce(reduced, op);
  return reduced;
}

torch::Tensor CommunicatorCollectives::broadcast(const torch::Tensor& value, int64_t root) {
  auto copy = value.detach().clone();
  group_.communicator().broadcast(copy, root);
  return copy;
}

bool CommunicatorCollectives::broadcast_decision(bool decision, std::source_location where) {
  const auto site = decision_site(where);
  const CollectiveSite named("broadcast_decision at " + site.file + ":" + std::to_string(site.line));
  auto message = torch::tensor({int64_t{decision ? 1 : 0}, site.id, site.line}, torch::kLong);
  group_.communicator().broadcast(message, 0);
  check_decision_site(site, message[1].item<int64_t>(), message[2].item<int64_t>(), topology(), "broadcast_decision",
                      "rank 0");
  return message[0].item<int64_t>() != 0;
}

bool CommunicatorCollectives::reduce_boolean_decision(bool decision, bool all, std::source_location where) {
  // One Min reduction for all three: "any" is "not all false", and the sites agree when the
  // smallest id is also the largest (the smallest of the negated ids).
  const auto site = decision_site(where);
  const CollectiveSite named("reduce_boolean_decision at " + site.file + ":" + std::to_string(site.line));
  const int64_t value = (all ? decision : !decision) ? 1 : 0;
  auto message = torch::tensor({value, site.id, -site.id}, torch::kLong);
  group_.communicator().all_reduce(message, ReduceOp::Min);
  const int64_t smallest = message[1].item<int64_t>(), largest = -message[2].item<int64_t>();
  check_decision_site(site, smallest == site.id ? largest : smallest, -1, topology(), "reduce_boolean_decision",
                      "another rank");
  const bool reduced = message[0].item<int64_t>() != 0;
  return all ? reduced : !reduced;
}

void CommunicatorCollectives::barrier(const std::string&) { group_.communicator().barrier(); }

std::vector<StateDict> CommunicatorCollectives::gather_states(const StateDict& mine, int64_t root) {
  return gather_state_dicts(group_.communicator(), mine, root);
}

}  // namespace volt

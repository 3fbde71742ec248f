#include "strategies/parallel_strategy.h"

#include <map>

#include "core/error.h"
#include "strategies/decision_site.h"
#include "distributed/flat_buffers.h"
#include "distributed/process_group_setup.h"
#include "distributed/state_gather.h"
#include "strategies/averaging/parameter_mean.h"
#include "strategies/dense_gradients.h"
#include "strategies/model_agreement.h"

namespace volt {

void ParallelStrategy::setup_environment(const StrategyEnvironment& environment) {
  Strategy::setup_environment(environment);
  check<ConfigurationError>(environment.cluster != nullptr, name(),
                            ": expected the Trainer to resolve a cluster environment, got none");
  cluster_ = environment.cluster;
  communicator_ = start_process_group(*cluster_, environment.timeout, environment.device, environment.launcher);
  world_counters_.at_last_step = communicator_->counters();
}

void ParallelStrategy::wrap_module(torch::nn::Module& module) { broadcast_module_state(module); }

void ParallelStrategy::broadcast_module_state(torch::nn::Module& module) {
  verify_same_model(communicator(), module);
  torch::NoGradGuard no_grad;
  for (auto& parameter : module.parameters()) {
    auto data = parameter.data();
    communicator().broadcast(data, 0);
  }
  for (auto& buffer : module.buffers()) {
    if (buffer.defined()) communicator().broadcast(buffer, 0);
  }
}

void ParallelStrategy::StepCounters::close_step(const CollectiveCounters& now) {
  last_step = now - at_last_step;
  at_last_step = now;
}

void ParallelStrategy::after_optimizer_steps(int64_t global_step) {
  Strategy::after_optimizer_steps(global_step);
  synchronize_models(global_step);
  world_counters_.close_step(communicator().counters());
  if (!topology_) return;
  for (const auto& [name, group] : topology_->groups()) group_counters_[name].close_step(group->counters());
}

Topology& ParallelStrategy::build_topology(std::optional<int64_t> node_size) {
  if (topology_) {
    check<ConfigurationError>(node_size == topology_node_size_, name(), ": the run's topology was built with ",
                              topology_node_size_ ? std::to_string(*topology_node_size_) : "the cluster's",
                              " processes per node, now ", node_size ? std::to_string(*node_size) : "the cluster's",
                              " are asked for; every part of a strategy must use the same subgroup size");
    return *topology_;
  }
  VOLT_INTERNAL_ASSERT(communicator_ != nullptr, name(), ": build_topology() before setup_environment()");
  topology_ = Topology::build(communicator_, cluster().topology(), node_size);
  topology_node_size_ = node_size;
  // Counting starts now (the groups' creation is not a step's traffic).
  for (const auto& [group_name, group] : topology_->groups()) {
    group_counters_[group_name].at_last_step = group->counters();
  }
  return *topology_;
}

Topology& ParallelStrategy::node_topology() const {
  VOLT_INTERNAL_ASSERT(topology_ != nullptr, name(), ": the topology is used before build_topology()");
  return *topology_;
}

void ParallelStrategy::broadcast_module_buffers(torch::nn::Module& module) {
  std::vector<torch::Tensor> buffers;
  for (auto& buffer : module.buffers()) {
    if (buffer.defined() && buffer.numel() > 0) buffers.push_back(buffer);
  }
  // One broadcast per dtype (buffers are few and small: a flat copy beats a collective each).
  through_flat_buffers(buffers, [this](torch::Tensor& flat) { communicator().broadcast(flat, 0); });
}

void ParallelStrategy::teardown() {
  Strategy::teardown();
  topology_.reset();
  group_counters_.clear();
  communicator_.reset();
}

void ParallelStrategy::on_exception(const std::exception& error) {
  if (!communicator_ || dynamic_cast<const DistributedError*>(&error) != nullptr) return;
  communicator_->report_failure(error.what());
}

ProcessTopology ParallelStrategy::topology() const {
  return cluster_ ? cluster_->topology() : ProcessTopology{};
}

Communicator& ParallelStrategy::communicator() const {
  VOLT_INTERNAL_ASSERT(communicator_ != nullptr, name(), ": the process group is used before setup_environment()");
  return *communicator_;
}

const ClusterEnvironment& ParallelStrategy::cluster() const {
  VOLT_INTERNAL_ASSERT(cluster_ != nullptr, name(), ": the cluster environment is used before setup_environment()");
  return *cluster_;
}

torch::Tensor ParallelStrategy::all_reduce(const torch::Tensor& value, ReduceOp op) {
  auto reduced = value.detach().clone();
  communicator().all_reduce(reduced, op);
  return reduced;
}

torch::Tensor ParallelStrategy::broadcast(const torch::Tensor& value, int64_t root) {
  auto copy = value.detach().clone();
  communicator().broadcast(copy, root);
  return copy;
}

bool ParallelStrategy::broadcast_decision(bool decision, std::source_location where) {
  const auto site = decision_site(where);
  auto message = torch::tensor({int64_t{decision ? 1 : 0}, site.id, site.line}, torch::kLong);
  communicator().broadcast(message, 0);
  check_decision_site(site, message[1].item<int64_t>(), message[2].item<int64_t>(), topology(), "broadcast_decision",
                      "rank 0");
  return message[0].item<int64_t>() != 0;
}

bool ParallelStrategy::reduce_boolean_decision(bool decision, bool all, std::source_location where) {
  // One Min reduction for all three: "any" is "not all false", and the sites agree when the
  // smallest id is also the largest (the smallest of the negated ids).
  const auto site = decision_site(where);
  const int64_t value = (all ? decision : !decision) ? 1 : 0;
  auto message = torch::tensor({value, site.id, -site.id}, torch::kLong);
  communicator().all_reduce(message, ReduceOp::Min);
  const int64_t smallest = message[1].item<int64_t>(), largest = -message[2].item<int64_t>();
  check_decision_site(site, smallest == site.id ? largest : smallest, -1, topology(), "reduce_boolean_decision",
                      "another rank");
  const bool reduced = message[0].item<int64_t>() != 0;
  return all ? reduced : !reduced;
}

void ParallelStrategy::barrier(const std::string&) { communicator().barrier(); }

std::vector<StateDict> ParallelStrategy::gather_states(const StateDict& mine, int64_t root) {
  return gather_state_dicts(communicator(), mine, root);
}

void ParallelStrategy::synchronize_accumulated_gradients(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  auto& comm = gradient_group();
  std::vector<torch::Tensor> params;
  for (const auto& item : module.named_parameters()) {
    if (!item.value().requires_grad()) continue;
    check_dense_gradient(item.value(), item.key(), name());  // Note [Sparse gradients]
    params.push_back(item.value());
  }
  auto has_grad = torch::zeros({static_cast<int64_t>(params.size())}, torch::kInt);
  for (size_t i = 0; i < params.size(); ++i) has_grad[static_cast<int64_t>(i)] = params[i].grad().defined() ? 1 : 0;
  comm.all_reduce(has_grad, ReduceOp::Max);
  std::vector<torch::Tensor> grads;
  for (size_t i = 0; i < params.size(); ++i) {
    if (has_grad[static_cast<int64_t>(i)].item<int>() == 0) continue;
    auto& p = params[i];
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    grads.push_back(p.grad());
  }
  averaging::replace_by_mean(grads, comm);  // in place: bucket views stay views
}

std::map<std::string, double> ParallelStrategy::metrics() const {
  auto metrics = Strategy::metrics();
  if (!communicator_) return metrics;
  for (const auto& [name, value] : communicator_->counters().as_metrics("comm/")) metrics[name] = value;
  metrics["comm/step_bytes"] = static_cast<double>(world_counters_.last_step.total_bytes());
  if (!topology_) return metrics;
  for (const auto& [name, group] : topology_->groups()) {
    const auto counters = group->counters();
    const std::string prefix = "comm/" + name + "/";
    metrics[prefix + "calls"] = static_cast<double>(counters.total_calls());
    metrics[prefix + "bytes"] = static_cast<double>(counters.total_bytes());
    const auto found = group_counters_.find(name);
    metrics[prefix + "step_bytes"] =
        found == group_counters_.end() ? 0.0 : static_cast<double>(found->second.last_step.total_bytes());
  }
  return metrics;
}

}  // namespace volt

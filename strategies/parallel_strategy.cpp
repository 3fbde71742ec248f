#include "strategies/parallel_strategy.h"

#include <map>

#include "core/error.h"
#include "distributed/flat_buffers.h"
#include "distributed/process_group_setup.h"
#include "strategies/averaging_gradient_synchronization.h"
#include "strategies/communicator_collectives.h"
#include "strategies/model_agreement.h"

namespace volt {

ParallelStrategy::ParallelStrategy() {
  hold(std::make_shared<CommunicatorCollectives>(*this, *this));
  hold(std::make_shared<AveragingGradientSynchronization>(*this, *this));
}

void ParallelStrategy::setup_environment(const StrategyEnvironment& environment) {
  Strategy::setup_environment(environment);
  check<ConfigurationError>(environment.cluster != nullptr, name(),
                            ": expected the Trainer to resolve a cluster environment, got none");
  cluster_ = environment.cluster;
  communicator_ = start_process_group(*cluster_, environment.timeout, environment.device, environment.launcher,
                                      environment.shared_memory, environment.process_group_backend,
                                      environment.hang_check);
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

ProcessTopology ParallelStrategy::cluster_topology() const {
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

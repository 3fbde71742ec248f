#pragma once
// Cluster environments by name (`--cluster-environment NAME`): auto, torchelastic, slurm, mpi,
// volt, and any a user registers. make_cluster_environment() and cluster_environment_names()
// (cluster_environment.h) resolve through this registry.
//
// `auto` asks each environment's detector in order and builds the first that says yes: a child
// of volt's launcher first (it may inherit SLURM's variables from a parent that srun started),
// then torchelastic, slurm, mpi, then user-registered environments in registration order;
// volt's own launcher when none does. Not thread-safe: register at start-up.
#include <functional>
#include <memory>
#include <string>

#include "core/registry.h"
#include "distributed/cluster/cluster_environment.h"

namespace volt {

using ClusterEnvironmentRegistry = Registry<ClusterEnvironment, const EnvironmentVariables&, const ClusterRequest&>;

// Whether the variables show that this environment's process manager started the process.
using ClusterDetector = std::function<bool(const EnvironmentVariables&)>;
using ClusterEnvironmentFactory =
    std::function<std::shared_ptr<ClusterEnvironment>(const EnvironmentVariables&, const ClusterRequest&)>;

ClusterEnvironmentRegistry& cluster_environment_registry();

// Registers `name`, built by `make`; with a `detect`or, `auto` may pick it (after the built-ins).
// Throws ConfigurationError when the name is malformed or taken.
void register_cluster_environment(const std::string& name, std::string description, ClusterDetector detect,
                                  ClusterEnvironmentFactory make);

}  // namespace volt

#include "distributed/cluster/cluster_environment_registry.h"

#include <utility>
#include <vector>

#include "distributed/cluster/environments.h"

namespace volt {
namespace {

// `auto`'s detection order (see the header): name → detector.
std::vector<std::pair<std::string, ClusterDetector>>& detectors() {
  static std::vector<std::pair<std::string, ClusterDetector>> order{
      {"volt", VoltEnvironment::is_launched_child},
      {"torchelastic", TorchElasticEnvironment::detect},
      {"slurm", SLURMEnvironment::detect},
      {"mpi", MPIEnvironment::detect},
  };
  return order;
}

template <typename Environment>
ClusterEnvironmentFactory factory_of() {
  return [](const EnvironmentVariables& variables, const ClusterRequest& request) {
    return std::make_shared<Environment>(variables, request);
  };
}

std::shared_ptr<ClusterEnvironment> detect_environment(const EnvironmentVariables& variables,
                                                       const ClusterRequest& request) {
  for (const auto& [name, detected] : detectors()) {
    if (detected(variables)) return cluster_environment_registry().create(name, variables, request);
  }
  return cluster_environment_registry().create("volt", variables, request);
}

void register_builtin_environments(ClusterEnvironmentRegistry& registry) {
  registry.add("auto", "the first detected: volt's launcher's child, torchelastic, slurm, mpi, then registered ones; "
                       "else volt's launcher", detect_environment);
  registry.add("torchelastic", "torchrun / torchelastic (RANK, WORLD_SIZE, LOCAL_RANK, ...)",
               factory_of<TorchElasticEnvironment>());
  registry.add("slurm", "SLURM's srun (SLURM_NTASKS, SLURM_PROCID, ...)", factory_of<SLURMEnvironment>());
  registry.add("mpi", "Open MPI or a PMI launcher (OMPI_COMM_WORLD_*, PMI_*)", factory_of<MPIEnvironment>());
  registry.add("volt", "volt's own launcher: this process starts the other local ranks", factory_of<VoltEnvironment>());
}

}  // namespace

ClusterEnvironmentRegistry& cluster_environment_registry() {
  static ClusterEnvironmentRegistry registry = [] {
    ClusterEnvironmentRegistry r("environment", "--cluster-environment");
    register_builtin_environments(r);
    return r;
  }();
  return registry;
}

void register_cluster_environment(const std::string& name, std::string description, ClusterDetector detect,
                                  ClusterEnvironmentFactory make) {
  cluster_environment_registry().add(name, std::move(description), std::move(make));
  if (detect) detectors().emplace_back(name, std::move(detect));
}

const std::vector<std::string>& cluster_environment_names() {
  return cluster_environment_registry().canonical_names();
}

std::shared_ptr<ClusterEnvironment> make_cluster_environment(const std::string& name,
                                                             const EnvironmentVariables& variables,
                                                             const ClusterRequest& request) {
  return cluster_environment_registry().create(name, variables, request);
}

}  // namespace volt

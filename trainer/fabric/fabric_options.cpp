#include "trainer/fabric/fabric_options.h"

namespace volt {
namespace {

// FabricOptions and TrainerOptions name these settings alike: one list serves both directions.
template <typename From, typename To>
void copy_run_settings(const From& from, To& to) {
  to.strategy = from.strategy;
  to.devices = from.devices;
  to.precision = from.precision;
  to.accelerator = from.accelerator;
  to.num_nodes = from.num_nodes;
  to.cluster_environment = from.cluster_environment;
  to.node_rank = from.node_rank;
  to.master_addr = from.master_addr;
  to.master_port = from.master_port;
  to.timeout = from.timeout;
  to.shared_memory_collectives = from.shared_memory_collectives;
  to.seed = from.seed;
  to.deterministic = from.deterministic;
  to.cuda_graph = from.cuda_graph;
  to.malloc_tuning = from.malloc_tuning;
  to.threads = from.threads;
  to.blas_threads = from.blas_threads;
}

}  // namespace

void FabricOptions::validate() const { trainer_options().validate(); }

TrainerOptions FabricOptions::trainer_options() const {
  TrainerOptions options;
  copy_run_settings(*this, options);
  return options;
}

FabricOptions FabricOptions::from(const TrainerOptions& options) {
  FabricOptions fabric_options;
  copy_run_settings(options, fabric_options);
  return fabric_options;
}

}  // namespace volt
